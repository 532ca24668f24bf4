"""HAProxy's runtime API over its admin socket: one command a connection, and the CSV of
``show stat`` read into rows. Every failure to reach it is ``ProxyUnavailable``."""

import csv
import io

import anyio

from services.ports.proxy import ProxyUnavailable

__all__ = ["ANSWER_WITHIN_S", "command", "setting", "stat_rows"]

ANSWER_WITHIN_S = 5.0

# What ``set server ... addr`` says when it did what it was asked.
_ADDR_DONE = ("no need to change", "IP changed", "port changed")


async def command(socket_path: str, line: str) -> str:
    """HAProxy's answer to one command (the socket closes after it: non-interactive mode).
    Raises ProxyUnavailable when the socket does not answer within ``ANSWER_WITHIN_S``."""
    chunks: list[bytes] = []
    try:
        with anyio.fail_after(ANSWER_WITHIN_S):
            async with await anyio.connect_unix(socket_path) as stream:
                await stream.send(line.encode() + b"\n")
                while True:
                    try:
                        chunks.append(await stream.receive())
                    except anyio.EndOfStream:
                        break
    except (OSError, TimeoutError, anyio.BrokenResourceError) as e:
        raise ProxyUnavailable(f"haproxy's admin socket {socket_path}: {e!r}") from e
    return b"".join(chunks).decode(errors="replace")


async def setting(socket_path: str, line: str) -> None:
    """Run a ``set``/``add``/``commit`` command that answers nothing when it succeeds.
    Raises ProxyUnavailable with HAProxy's words when it refuses."""
    said = (await command(socket_path, line)).strip()
    if said and not said.startswith(_ADDR_DONE):
        raise ProxyUnavailable(f"haproxy refused {line!r}: {said.splitlines()[0]}")


def stat_rows(text: str) -> list[dict[str, str]]:
    """``show stat``'s CSV (its header starts with ``# ``) as one dict a row."""
    body = text.removeprefix("# ")
    return [row for row in csv.DictReader(io.StringIO(body)) if row.get("pxname")]
