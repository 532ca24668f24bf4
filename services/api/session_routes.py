"""Sessions as the projections hold them: ``/v1/sessions`` (a page, one, its history) and
``/v1/destroys/{request_id}`` (the answer to a destroy request).

Who may read: each viewer the sessions in its scope; a session out of it answers 404, as
one that does not exist (another's session is not even said to exist).
"""

from typing import Annotated, Any

import duckdb
from fastapi import FastAPI, HTTPException, Query

from events import AnyEvent, decode
from projections import queries
from projections.store import applied_seq
from projections.story import story, summary
from services.api import models, shapes
from services.api.guard import Who
from services.api.params import NOT_FOUND, Ask, Limit
from services.domain.access.visibility import Viewer
from services.domain.status import SessionStatus

__all__ = ["mount"]


def mount(app: FastAPI, query: Ask[Any]) -> None:
    @app.get("/v1/sessions", tags=["sessions"])
    async def list_sessions(
        id: Annotated[list[str], Query(description="any of these session ids")] = [],  # noqa: B006
        status: Annotated[list[SessionStatus], Query(description="any of these")] = [],  # noqa: B006
        owner: Annotated[str | None, Query(description="access key")] = None,
        agent: Annotated[str | None, Query(description="agent id")] = None,
        limit: Limit = 100,
        offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
        *,
        viewer: Who,
    ) -> models.SessionPage:
        """Sessions in the viewer's scope, newest request first, filtered and paginated."""
        statuses = [s.value for s in status]

        def work(con: duckdb.DuckDBPyConnection) -> tuple[int, list[Any], int, dict[str, Any]]:
            total, rows = queries.session_rows(
                con,
                session_ids=id,
                statuses=statuses,
                owner=owner,
                agent=agent,
                scope=viewer.scope,
                limit=limit,
                offset=offset,
            )
            return total, rows, applied_seq(con), _memory(con, rows)

        total, rows, seq, memory = await query(work)
        return models.SessionPage(
            total=total,
            limit=limit,
            offset=offset,
            last_seq=seq,
            sessions=[shapes.session_from_row(r, memory.get(r["session_id"], [])) for r in rows],
        )

    @app.get("/v1/sessions/{session_id}", tags=["sessions"], responses=NOT_FOUND)
    async def get_session(session_id: str, viewer: Who) -> models.Session:
        """One session: status, placement, times of each transition, reasons."""

        def work(con: duckdb.DuckDBPyConnection) -> tuple[Any, list[Any]]:
            row = one_session(con, session_id, viewer)
            return row, _memory(con, [row]).get(session_id, [])

        return shapes.session_from_row(*await query(work))

    @app.get("/v1/sessions/{session_id}/history", tags=["sessions"], responses=NOT_FOUND)
    async def session_history(session_id: str, viewer: Who) -> models.SessionHistory:
        """A session's whole story: who asked, when it waited and why, where it ran, how
        it ended; with its status transitions and every event that names it."""

        def work(con: duckdb.DuckDBPyConnection) -> tuple[Any, list[Any], list[Any], list[Any]]:
            row = one_session(con, session_id, viewer)
            return (
                row,
                queries.session_transitions(con, session_id),
                queries.session_events(con, session_id),
                _memory(con, [row]).get(session_id, []),
            )

        return _history(*await query(work))

    @app.get("/v1/destroys/{request_id}", tags=["sessions"], responses=NOT_FOUND)
    async def destroy_answer(request_id: str, viewer: Who) -> models.DestroyAnswer:
        """The answer to a destroy request (its event id): refused, and why, or carried
        out (the session then ends). 404 while it has no answer (or it is not the
        viewer's: asked by another, of a session out of its scope)."""
        row = await query(lambda con: queries.destroy_row(con, request_id))
        if row is None or not viewer.scope.sees_key(row["requester"]):
            raise HTTPException(404, f"destroy request {request_id!r} has no answer (yet)")
        return models.DestroyAnswer(**row)


def one_session(con: duckdb.DuckDBPyConnection, session_id: str, viewer: Viewer) -> dict[str, Any]:
    """The session's row; 404 if there is none in the viewer's scope (a session of
    another is not even said to exist)."""
    _, rows = queries.session_rows(con, session_id=session_id, scope=viewer.scope)
    if not rows:
        raise HTTPException(404, f"no session {session_id!r}")
    return rows[0]


def _memory(con: duckdb.DuckDBPyConnection, rows: list[Any]) -> dict[str, list[Any]]:
    """The last GPU memory counted of each of ``rows``'s sessions that hold devices (those
    rows are in the viewer's scope already): one query for the page."""
    held = [r["session_id"] for r in rows if r["holds_allocation"]]
    return queries.last_gpu_memory(con, held)


def _history(
    row: dict[str, Any],
    transitions: list[dict[str, Any]],
    events: list[dict[str, Any]],
    memory: list[dict[str, Any]],
) -> models.SessionHistory:
    """The history of the session of ``row``, told from its rows of transitions and
    events (a malformed record is listed, not told)."""
    decoded: list[tuple[int, AnyEvent]] = [
        (e["seq"], decode(bytes(e["payload"]))) for e in events if e["type"] != "malformed"
    ]
    lines = story(decoded, {t["event_id"] for t in transitions})
    return models.SessionHistory(
        session=shapes.session_from_row(row, memory),
        summary=summary(lines),
        story=[models.StoryLine(**line.__dict__) for line in lines],
        transitions=[
            models.Transition(
                seq=t["seq"],
                at=t["happened_at"],
                status=t["status"],
                event_id=t["event_id"],
                actor=t["actor"],
                type=t["type"],
            )
            for t in transitions
        ],
        events=[shapes.event_from_row(e) for e in events],
    )
