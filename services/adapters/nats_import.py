"""Importing the NATS client for a short-lived process (a CLI call), without what it does
not use. Imports nothing itself: it must run before nats-py is first imported."""

import sys

__all__ = ["import_nats_client"]


def import_nats_client(*, websockets: bool) -> None:
    """Import nats-py, without its websocket transport unless asked for.

    nats-py imports aiohttp, for websockets only, as it is itself imported: most of the
    cost of a CLI call that publishes. Hidden while nats-py is imported, aiohttp reads as
    absent there (nats-py's own fallback) and stays importable for anyone else after.
    """
    if websockets or "nats" in sys.modules or "aiohttp" in sys.modules:
        import nats

        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]
    try:
        import nats  # noqa: F401
    finally:
        del sys.modules["aiohttp"]
