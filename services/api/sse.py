"""The live event stream (server-sent events), resumable without gap or duplicate.

Each log record is one SSE message whose ``id`` is its stream sequence. The stream reads
the projection's events table after the last id it sent, then waits for the projector to
commit more, so a client that reconnects with ``Last-Event-ID: N`` gets exactly the
records after N, in order.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, Protocol, TypeVar

import anyio
import duckdb
from starlette.responses import StreamingResponse

from projections.queries import EventFilter, event_rows
from projections.store import applied_seq
from services.api.shapes import event_from_row
from services.domain.access.visibility import Scope

__all__ = ["event_stream"]

T = TypeVar("T")
_BATCH = 500
_KEEPALIVE_S = 15.0
Query = Callable[[Callable[[duckdb.DuckDBPyConnection], T]], Awaitable[T]]
Page = tuple[list[dict[str, Any]], int]


class _Source(Protocol):
    async def wait_beyond(self, seq: int) -> int: ...


def _page(f: EventFilter, con: duckdb.DuckDBPyConnection) -> tuple[list[dict[str, Any]], int]:
    """A page of records after ``f.after``, and how far it looked: to the log's end as
    projected, unless the page is full."""
    rows = event_rows(con, f, _BATCH)
    return rows, rows[-1]["seq"] if len(rows) == _BATCH else applied_seq(con)


def _frame(row: dict[str, Any]) -> bytes:
    text = event_from_row(row).model_dump_json()  # compact: no newline inside data
    return f"id: {row['seq']}\nevent: {row['type']}\ndata: {text}\n\n".encode()


async def _more(source: _Source, last: int, stop: anyio.Event) -> bool:
    """Wait until a record beyond ``last`` is projected (True), or a keep-alive is due or
    the server stops (False)."""
    woke = False
    with anyio.move_on_after(_KEEPALIVE_S):
        async with anyio.create_task_group() as tg:

            async def beyond() -> None:
                nonlocal woke
                await source.wait_beyond(last)
                woke = True
                tg.cancel_scope.cancel()

            async def stopped() -> None:
                await stop.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(beyond)
            tg.start_soon(stopped)
    return woke


def event_stream(
    source: _Source,
    after: int,
    stop: anyio.Event,
    query: Query[Page],
    scope: Scope,
    live: Callable[[], bool],
) -> StreamingResponse:
    """Every record in ``scope`` after ``after``, then each new one as it is projected,
    until ``stop``, or until the viewer may read no more (``live()`` false: its keypair
    was revoked)."""

    async def body() -> AsyncIterator[bytes]:
        last = after
        yield b"retry: 1000\n\n"
        while not stop.is_set() and live():
            rows, looked = await query(partial(_page, EventFilter(after=last, scope=scope)))
            if rows:
                # One write for the page: a chunk per event cost the server and the client a
                # system call and a parse each.
                yield b"".join(_frame(row) for row in rows)
            # Every record in scope up to ``looked`` is sent: wait beyond it, not beyond the
            # last one sent, or records out of scope would wake this stream again and again.
            last = max(last, looked)
            if len(rows) == _BATCH:
                continue
            if not await _more(source, last, stop) and not stop.is_set():
                yield b": keep-alive\n\n"

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
