"""Waiting on sessions through the read API: read them, then follow the event stream.

Every event that names a session still waited on makes the session be read again (once
per page of events the server sends, not once per event), so what a wait returns is
always the API's own session, never a status guessed from event types.
"""

import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from services.cli.api_client import ReadApi

__all__ = ["Session", "answers", "position", "read_sessions", "wait_for"]

Session = dict[str, Any]
_CHUNK = 100  # ids in one request: the query string stays well within what servers take


def position(api: ReadApi) -> int:
    """How far the API has read the log: a request published after this call is on the log
    after it (the log's end is at or past it), so answers are looked for from there."""
    page = api.get("/v1/events", {"after": (1 << 63) - 1, "limit": 1})
    seq: int = page["last_seq"]
    return seq


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


def answers(
    api: ReadApi, paths: Collection[str], after: int, *, timeout_s: float
) -> dict[str, Any]:
    """What the API answers at each of ``paths`` once it has an answer there (404 until
    then): the answers of requests that came after sequence ``after``, read again each
    time the event stream brings a page after it, until all are there or the timeout."""
    deadline = time.monotonic() + timeout_s
    found = _answered(api, paths)
    if len(found) < len(paths):
        for e in api.stream(after, deadline=deadline):
            if e.more:
                continue  # more of the page is here: ask once it is read
            found.update(_answered(api, [p for p in paths if p not in found]))
            if len(found) == len(paths):
                break
    return found


def _answered(api: ReadApi, paths: Iterable[str]) -> dict[str, Any]:
    from services.cli.api_client import ApiError

    found = {}
    for path in paths:
        try:
            found[path] = api.get(path)
        except ApiError as e:
            if e.status != 404:
                raise
    return found
