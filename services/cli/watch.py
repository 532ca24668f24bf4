"""Waiting on sessions through the read API: read them, then follow the event stream.

Every event that names a session still waited on makes the session be read again (once
per page of events the server sends, not once per event), so what a wait returns is
always the API's own session, never a status guessed from event types.
"""

import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from services.cli.api_client import ReadApi

__all__ = ["Session", "read_sessions", "wait_for"]

Session = dict[str, Any]
_CHUNK = 100  # ids in one request: the query string stays well within what servers take


def read_sessions(api: ReadApi, ids: Iterable[str]) -> tuple[dict[str, Session], int]:
    """The sessions of ``ids`` the API knows, and a log sequence they are all current at."""
    wanted = list(dict.fromkeys(ids))
    found: dict[str, Session] = {}
    seq: int | None = None
    for i in range(0, len(wanted), _CHUNK):
        part = wanted[i : i + _CHUNK]
        page = api.get("/v1/sessions", {"id": part, "limit": len(part)})
        found.update((s["id"], s) for s in page["sessions"])
        seq = page["last_seq"] if seq is None else min(seq, page["last_seq"])
    return found, seq or 0


def wait_for(
    api: ReadApi,
    ids: Collection[str],
    reached: Callable[[Session], bool],
    *,
    timeout_s: float,
) -> dict[str, Session]:
    """The sessions of ``ids`` once each has ``reached``, or as they are at the timeout
    (an id the API never heard of is missing). Raises ApiError or ApiUnreachable."""
    deadline = time.monotonic() + timeout_s
    current, seq = read_sessions(api, ids)
    pending = {i for i in ids if i not in current or not reached(current[i])}
    dirty: set[str] = set()
    for e in api.stream(seq, deadline=deadline) if pending else ():
        if e.event.get("session_id") in pending:
            dirty.add(e.event["session_id"])
        if not dirty or e.more:
            continue
        _refresh(api, dirty, current, pending, reached)
        if not pending:
            break
    if dirty:  # the deadline came with a page half read: what it named is read still
        _refresh(api, dirty, current, pending, reached)
    return current


def _refresh(
    api: ReadApi,
    dirty: set[str],
    current: dict[str, Session],
    pending: set[str],
    reached: Callable[[Session], bool],
) -> None:
    """Read the ``dirty`` sessions again into ``current``; those that reached leave
    ``pending``; ``dirty`` is emptied."""
    fresh, _ = read_sessions(api, dirty)
    current.update(fresh)
    pending -= {i for i, s in fresh.items() if reached(s)}
    dirty.clear()
