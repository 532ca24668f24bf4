"""The read API: every answer comes from the DuckDB projections of the log.

Read only: every change to the cluster is an event on the log, written by the CLI or any
client of the log, never through this API. Each request gets its own DuckDB connection
and does its DuckDB work in a worker thread. Errors are JSON (``Problem``); a bad
parameter gets a 4xx that says what is wrong.
"""

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, TypeVar

import anyio
import duckdb
import structlog
from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from events import AnyEvent, decode
from projections import queries
from projections.replay import seq_at, state_at
from projections.store import applied_seq
from projections.story import story, summary
from services.api import (
    console,
    export_routes,
    guard,
    health_routes,
    image_routes,
    models,
    shapes,
    tenancy_routes,
    vfolder_routes,
)
from services.api.auth import Authenticator, TokenSigner
from services.api.guard import AccessRecorder, Guard, Who, WhoStreaming
from services.api.sse import event_stream
from services.domain.access.visibility import Viewer
from services.domain.status import ENDED, SessionStatus
from services.domain.tenancy.model import Tenancy

__all__ = ["MAX_SEQ", "ReadSource", "create_app"]

MAX_SEQ = (1 << 63) - 1
T = TypeVar("T")
log = structlog.get_logger()

DESCRIPTION = """\
The cluster as the event log says it is, or was: sessions, agents and their GPUs, usage,
every event (the audit log), the state at any past instant, and a live stream of events.
Read only: changes are events on the log (`fgpu session create`, ...), never API calls.
Amounts are exact decimal strings (fGPU, CPU cores); memory is in bytes; times are UTC.
"""


class ReadSource(Protocol):
    """What the API reads through: the projector of this process."""

    @property
    def last_seq(self) -> int: ...

    def cursor(self) -> duckdb.DuckDBPyConnection: ...

    async def wait_beyond(self, seq: int) -> int: ...

    def tenancy(self) -> Tenancy: ...


Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
Seq = Annotated[int, Query(ge=0, le=MAX_SEQ)]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": models.Problem}}


def _utc(at: datetime | None, name: str) -> datetime | None:
    """``at`` in UTC (a time without offset is taken as UTC); 422 if it has none there."""
    if at is None:
        return None
    try:
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except (OverflowError, ValueError) as e:
        raise HTTPException(422, f"{name}: {at.isoformat()} is out of range in UTC") from e


def create_app(
    source: ReadSource,
    *,
    closing: anyio.Event | None = None,
    signer: TokenSigner | None = None,
    recorder: AccessRecorder | None = None,
    storage: vfolder_routes.Storage | None = None,
    health: health_routes.Health | None = None,
    snapshots: health_routes.Snapshots | None = None,
) -> FastAPI:
    """The API over ``source``; ``closing`` (set on shutdown) ends the event streams.
    ``signer`` signs its tokens (a fresh key if None); ``recorder`` hears of sign-ins and
    refusals, for the audit log; ``storage``: the storage service's routes (virtual
    folders' files) on this host's folders; ``health``: the log's health (none known:
    an empty list); ``snapshots``: the actors' snapshots' health (None: not known here)."""
    app = FastAPI(
        title="fgpu read API",
        version="1",
        description=DESCRIPTION,
        responses={
            401: {"model": models.Problem, "description": "no live token (guard.py)"},
            422: {"model": models.Problem, "description": "bad parameters"},
        },
    )
    _errors(app)
    stop = closing or anyio.Event()
    auth = Authenticator(source.tenancy, signer or TokenSigner.fresh(), time.time)
    guard.mount(app, Guard(auth, recorder))

    async def query(fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        def work() -> T:
            con = source.cursor()
            try:
                # One snapshot for all of a request's statements: a batch committed between
                # two of them must not show in one half (a session's row, its history).
                con.execute("BEGIN TRANSACTION")
                return fn(con)
            finally:
                con.close()

        return await anyio.to_thread.run_sync(work)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/console")

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

        def work(con: duckdb.DuckDBPyConnection) -> tuple[int, list[Any], int]:
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
            return total, rows, applied_seq(con)

        total, rows, seq = await query(work)
        return models.SessionPage(
            total=total,
            limit=limit,
            offset=offset,
            last_seq=seq,
            sessions=[shapes.session_from_row(r) for r in rows],
        )

    def one_session(
        con: duckdb.DuckDBPyConnection, session_id: str, viewer: Viewer
    ) -> dict[str, Any]:
        """The session's row; 404 if there is none in the viewer's scope (a session of
        another is not even said to exist)."""
        _, rows = queries.session_rows(con, session_id=session_id, scope=viewer.scope)
        if not rows:
            raise HTTPException(404, f"no session {session_id!r}")
        return rows[0]

    @app.get("/v1/sessions/{session_id}", tags=["sessions"], responses=_NOT_FOUND)
    async def get_session(session_id: str, viewer: Who) -> models.Session:
        """One session: status, placement, times of each transition, reasons."""
        row = await query(lambda con: one_session(con, session_id, viewer))
        return shapes.session_from_row(row)

    @app.get("/v1/sessions/{session_id}/history", tags=["sessions"], responses=_NOT_FOUND)
    async def session_history(session_id: str, viewer: Who) -> models.SessionHistory:
        """A session's whole story: who asked, when it waited and why, where it ran, how
        it ended; with its status transitions and every event that names it."""

        def work(con: duckdb.DuckDBPyConnection) -> tuple[Any, list[Any], list[Any]]:
            return (
                one_session(con, session_id, viewer),
                queries.session_transitions(con, session_id),
                queries.session_events(con, session_id),
            )

        row, transitions, events = await query(work)
        decoded: list[tuple[int, AnyEvent]] = [
            (e["seq"], decode(bytes(e["payload"]))) for e in events if e["type"] != "malformed"
        ]
        lines = story(decoded, {t["event_id"] for t in transitions})
        return models.SessionHistory(
            session=shapes.session_from_row(row),
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

    @app.get("/v1/destroys/{request_id}", tags=["sessions"], responses=_NOT_FOUND)
    async def destroy_answer(request_id: str, viewer: Who) -> models.DestroyAnswer:
        """The answer to a destroy request (its event id): refused, and why, or carried
        out (the session then ends). 404 while it has no answer (or it is not the
        viewer's: asked by another, of a session out of its scope)."""
        row = await query(lambda con: queries.destroy_row(con, request_id))
        if row is None or not viewer.scope.sees_key(row["requester"]):
            raise HTTPException(404, f"destroy request {request_id!r} has no answer (yet)")
        return models.DestroyAnswer(**row)

    @app.get("/v1/agents", tags=["agents"])
    async def list_agents(viewer: Who) -> models.AgentList:
        """Agents with their capacity and each GPU's fGPU shares, by session (only the
        viewer's sessions' shares are named; the others count in what is allocated)."""
        rows, seq = await query(
            lambda con: (_agents_seen(con, viewer, queries.agent_rows(con)), applied_seq(con))
        )
        return models.AgentList(last_seq=seq, agents=[shapes.agent_from_row(a) for a in rows])

    @app.get("/v1/agents/{agent_id}", tags=["agents"], responses=_NOT_FOUND)
    async def get_agent(agent_id: str, viewer: Who) -> models.Agent:
        rows = await query(lambda con: _agents_seen(con, viewer, queries.agent_rows(con, agent_id)))
        if not rows:
            raise HTTPException(404, f"no agent {agent_id!r}")
        return shapes.agent_from_row(rows[0])

    @app.get("/v1/usage", tags=["agents"])
    async def usage(viewer: Who) -> models.Usage:
        """Allocated against capacity, per agent and GPU, and per owner (the owners in the
        viewer's scope)."""

        def work(con: duckdb.DuckDBPyConnection) -> tuple[list[Any], list[Any], int]:
            owners = [o for o in queries.owner_usage(con) if viewer.scope.sees_key(o["owner"])]
            return queries.agent_rows(con), owners, applied_seq(con)

        agents, owners, seq = await query(work)
        totals = {k: sum(a[k] for a in agents) for k in _TOTALS}
        return models.Usage(
            last_seq=seq,
            capacity=shapes.amounts(totals["cap_fgpu"], totals["cap_cpu"], totals["cap_mem"]),
            allocated=shapes.amounts(
                totals["alloc_fgpu"], totals["alloc_cpu"], totals["alloc_mem"]
            ),
            free=shapes.amounts(totals["free_fgpu"], totals["free_cpu"], totals["free_mem"]),
            agents=[_agent_usage(shapes.agent_from_row(a)) for a in agents],
            owners=shapes.owners_from_rows(owners),
        )

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
            since=_utc(since, "since"),
            until=_utc(until, "until"),
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

    @app.get("/v1/state", tags=["time travel"], responses=_NOT_FOUND)
    async def state(
        at: Annotated[datetime | None, Query(description="an instant (UTC if no offset)")] = None,
        seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description="a log sequence")] = None,
        *,
        viewer: Who,
    ) -> models.ClusterAt:
        """The cluster as it was at ``at`` (the log up to the last event stamped at or
        before it) or right after record ``seq``; now if neither is given. Computed by
        replaying the log from the nearest snapshot."""
        if at is not None and seq is not None:
            raise HTTPException(422, "give either at or seq, not both")
        when = _utc(at, "at")

        def work(con: duckdb.DuckDBPyConnection) -> models.ClusterAt:
            end = applied_seq(con)
            if seq is not None and seq > end:
                raise HTTPException(404, f"sequence {seq} is beyond the log's end ({end})")
            n = seq if seq is not None else (seq_at(con, when) if when is not None else end)
            past = state_at(con, n)
            seen = viewer.scope.sees_session
            live = [
                v
                for v in past.sessions()
                if v.status not in ENDED and seen(v.owner, v.user, v.domain)
            ]
            counts: dict[str, int] = dict(past.ended_counts) if viewer.scope.everything else {}
            for v in live:
                counts[v.status.value] = counts.get(v.status.value, 0) + 1
            owners = {v.session_id: v.owner for v in live}
            return models.ClusterAt(
                seq=past.seq,
                at=past.at,
                last_seq=end,
                counts=counts,
                sessions=[shapes.session_from_view(v) for v in live],
                agents=[
                    _only_shares_of(shapes.agent_from_view(past.state.agents[k], owners), owners)
                    for k in sorted(past.state.agents)
                ],
                owners=shapes.owners_from_state(past.state, live, viewer.scope),
            )

        return await query(work)

    @app.get(
        "/v1/events/stream",
        tags=["events"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "events"}},
    )
    async def stream(
        after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="start after it")] = 0,
        last_event_id: Annotated[
            str | None, Header(description="resume after this sequence (wins over after)")
        ] = None,
        *,
        viewer: WhoStreaming,
    ) -> StreamingResponse:
        """Server-sent events, one per log record in the viewer's scope (``id`` is its
        sequence), forever.

        A reconnecting client sends ``Last-Event-ID`` and gets every event after it:
        no gap, no duplicate."""
        start = after
        if last_event_id is not None:
            text = last_event_id.strip()
            # ASCII digits only ("²" is a digit to str.isdigit, not to int), and few of
            # them (int() refuses thousands).
            if not (text.isascii() and text.isdigit() and len(text) <= 19) or int(text) > MAX_SEQ:
                raise HTTPException(400, f"Last-Event-ID must be a sequence, got {last_event_id!r}")
            start = int(text)
        return event_stream(source, start, stop, query, viewer.scope, lambda: auth.live(viewer))

    tenancy_routes.mount(app, query, source.tenancy)
    image_routes.mount(app, query, source.tenancy)
    if storage is not None:
        vfolder_routes.mount(app, storage, source.tenancy)
    export_routes.mount(app, query, _utc)
    health_routes.mount(app, query, health or tuple, snapshots)
    console.mount(app)
    return app


_TOTALS = (
    "cap_fgpu",
    "cap_cpu",
    "cap_mem",
    "alloc_fgpu",
    "alloc_cpu",
    "alloc_mem",
    "free_fgpu",
    "free_cpu",
    "free_mem",
)


def _agents_seen(
    con: duckdb.DuckDBPyConnection, viewer: Viewer, agents: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``agents`` (rows) with only the shares of sessions in the viewer's scope."""
    if viewer.scope.everything:
        return agents
    ids = [s["session_id"] for a in agents for g in a["gpus"] for s in g["shares"]]
    seen = queries.visible_sessions(con, ids, viewer.scope)
    for a in agents:
        for g in a["gpus"]:
            g["shares"] = [s for s in g["shares"] if s["session_id"] in seen]
    return agents


def _only_shares_of(a: models.Agent, sessions: dict[str, str]) -> models.Agent:
    """``a`` with only the shares of ``sessions``."""
    for g in a.gpus:
        g.shares = [s for s in g.shares if s.session in sessions]
    return a


def _agent_usage(a: models.Agent) -> models.AgentUsage:
    return models.AgentUsage(
        id=a.id,
        lost=a.lost,
        capacity=a.capacity,
        allocated=a.allocated,
        free=a.free,
        gpus=[
            models.GpuUsage(index=g.index, capacity=g.capacity, allocated=g.allocated, free=g.free)
            for g in a.gpus
        ],
    )


def _errors(app: FastAPI) -> None:
    """Every error as JSON with a message a person can act on."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = jsonable_encoder(exc.errors(), exclude={"input", "ctx", "url"})
        parts = []
        for e in errors:
            where = ".".join(str(x) for x in e.get("loc", ()))
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        body = models.Problem(detail="; ".join(parts) or "invalid request", errors=errors)
        return JSONResponse(body.model_dump(), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = models.Problem(detail=str(exc.detail))
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("api.error", path=request.url.path, error=repr(exc))
        body = models.Problem(detail=f"internal error: {type(exc).__name__}")
        return JSONResponse(body.model_dump(), status_code=500)
