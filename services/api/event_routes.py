"""The audit log a page at a time: ``/v1/events``.

Who may read: each viewer the events in its scope (those naming its keys, or of its
sessions). The live stream is ``stream_routes``'s, the export ``export_routes``'s.
"""

from datetime import datetime
from typing import Annotated, Any

from fastapi import FastAPI, Query

from projections import queries
from projections.store import applied_seq
from services.api import models, shapes
from services.api.guard import Who
from services.api.params import MAX_SEQ, Ask, Limit, utc

__all__ = ["mount"]


def mount(app: FastAPI, query: Ask[Any]) -> None:
    @app.get("/v1/events", tags=["events"])
    async def list_events(
        after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="log sequence")] = 0,
        limit: Limit = 100,
        since: Annotated[datetime | None, Query(description="happened at or after")] = None,
        until: Annotated[datetime | None, Query(description="happened at or before")] = None,
        session: str | None = None,
        owner: str | None = None,
        agent: str | None = None,
        type: Annotated[list[str], Query(description="event types (tags)")] = [],  # noqa: B006
        *,
        viewer: Who,
    ) -> models.EventPage:
        """The audit log: events after a sequence and/or within a time range, oldest first;
        of those, the ones in the viewer's scope (naming its keys, or of its sessions).

        ``owner`` matches the events that name the access key and those of its sessions.
        """
        f = queries.EventFilter(
            after=after,
            since=utc(since, "since"),
            until=utc(until, "until"),
            session=session,
            owner=owner,
            agent=agent,
            types=tuple(type),
            scope=viewer.scope,
        )
        rows, seq = await query(lambda con: (queries.event_rows(con, f, limit), applied_seq(con)))
        return models.EventPage(
            events=[shapes.event_from_row(r) for r in rows],
            last_seq=seq,
            next_after=rows[-1]["seq"] if rows else after,
        )
