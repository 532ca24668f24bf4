"""The audit log exported: every event of a time range, as JSON lines or a Parquet file,
within the viewer's scope (a user's own events, a domain admin's domain, everything for
a superadmin), oldest first."""

import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import duckdb
from fastapi import FastAPI, Query
from fastapi.responses import FileResponse, StreamingResponse
from starlette.background import BackgroundTask

from projections import queries
from services.api import models
from services.api.guard import Who
from services.api.shapes import event_from_row

__all__ = ["mount"]

T = TypeVar("T")
Ask = Callable[[Callable[[duckdb.DuckDBPyConnection], T]], Awaitable[T]]
_PAGE = 5000
MAX_SEQ = (1 << 63) - 1


def mount(
    app: FastAPI,
    query: Ask[Any],
    utc: Callable[[datetime | None, str], datetime | None],
) -> None:
    @app.get(
        "/v1/events/export",
        tags=["events"],
        response_class=StreamingResponse,
        responses={
            200: {
                "content": {"application/x-ndjson": {}, "application/vnd.apache.parquet": {}},
                "description": "the events, one JSON object per line, or a Parquet file",
            },
            422: {"model": models.Problem},
        },
    )
    async def export(
        viewer: Who,
        since: Annotated[datetime | None, Query(description="happened at or after")] = None,
        until: Annotated[datetime | None, Query(description="happened at or before")] = None,
        after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="log sequence")] = 0,
        format: Annotated[Literal["jsonl", "parquet"], Query(description="jsonl or parquet")] = (
            "jsonl"
        ),
    ) -> Any:
        """Every event in the viewer's scope within the range, oldest first: JSON lines
        (each as in `/v1/events`), or a Parquet file (the audit log's columns, the message's
        bytes in `payload`), written and read back before it is sent."""
        f = queries.EventFilter(
            after=after, since=utc(since, "since"), until=utc(until, "until"), scope=viewer.scope
        )
        if format == "parquet":
            fd, path = tempfile.mkstemp(prefix="fgpu-export-", suffix=".parquet")
            os.close(fd)
            try:
                await query(partial(queries.write_events_parquet, f=f, path=path))
            except BaseException:
                os.unlink(path)
                raise
            return FileResponse(
                path,
                media_type="application/vnd.apache.parquet",
                filename="fgpu-events.parquet",
                background=BackgroundTask(os.unlink, path),
            )
        return StreamingResponse(_lines(query, f), media_type="application/x-ndjson")


def _page(f: queries.EventFilter, con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    return queries.event_rows(con, f, _PAGE)


async def _lines(query: Ask[Any], f: queries.EventFilter) -> AsyncIterator[bytes]:
    """The events, a page at a time (each page one read of its own)."""
    after = f.after
    while True:
        page = queries.EventFilter(after=after, since=f.since, until=f.until, scope=f.scope)
        rows: list[dict[str, Any]] = await query(partial(_page, page))
        if rows:
            yield b"".join(event_from_row(r).model_dump_json().encode() + b"\n" for r in rows)
        if len(rows) < _PAGE:
            return
        after = rows[-1]["seq"]
