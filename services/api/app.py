"""The read API: every answer comes from the DuckDB projections of the log.

Read only: every change to the cluster is an event on the log, written by the CLI or any
client of the log, never through this API; the web UI's writes are its user's own
requests, published on the user's own connection to the bus (``ui.py``). Each request
gets its own DuckDB connection and does its DuckDB work in a worker thread. Errors are
JSON (``Problem``); a bad parameter gets a 4xx that says what is wrong.
"""

import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio
import duckdb
import structlog
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.api import (
    agent_routes,
    console,
    endpoint_routes,
    event_routes,
    export_routes,
    guard,
    health_routes,
    image_routes,
    launch_routes,
    models,
    pipeline_routes,
    secret_routes,
    session_routes,
    state_routes,
    stream_routes,
    tenancy_routes,
    ui,
    vfolder_routes,
)
from services.api.auth import Authenticator, TokenSigner
from services.api.browser import ActAs, BrowserSessions
from services.api.guard import AccessRecorder, Guard
from services.api.params import MAX_SEQ, Ask, utc
from services.domain.tenancy.model import Tenancy

__all__ = ["MAX_SEQ", "ReadSource", "create_app"]

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


def create_app(
    source: ReadSource,
    *,
    closing: anyio.Event | None = None,
    signer: TokenSigner | None = None,
    recorder: AccessRecorder | None = None,
    storage: vfolder_routes.Storage | None = None,
    health: health_routes.Health | None = None,
    snapshots: health_routes.Snapshots | None = None,
    act: ActAs | None = None,
) -> FastAPI:
    """The API over ``source``; ``closing`` (set on shutdown) ends the event streams.
    ``signer`` signs its tokens (a fresh key if None); ``recorder`` hears of sign-ins and
    refusals, for the audit log; ``storage``: the storage service's routes (virtual
    folders' files) on this host's folders; ``health``: the log's health (none known:
    an empty list); ``snapshots``: the actors' snapshots' health (None: not known here);
    ``act``: how the web UI connects to the bus as a signed-in user, for its writes (None:
    it makes none). Its browser sessions are ``app.state.guard.browsers``, to be closed
    (``aclose``) when the server stops."""
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
    door = Guard(auth, recorder, BrowserSessions(time.time, act))
    guard.mount(app, door)

    query = _reads(source)

    # The order routes are registered in is the order they are matched in, and the
    # order the schema lists them in.
    session_routes.mount(app, query)
    endpoint_routes.mount(app, query)
    agent_routes.mount(app, query)
    event_routes.mount(app, query)
    state_routes.mount(app, query)
    stream_routes.mount(app, query, source, stop, door)
    tenancy_routes.mount(app, query, source.tenancy)
    image_routes.mount(app, query, source.tenancy)
    launch_routes.mount(app, query, source.tenancy)
    pipeline_routes.mount(app, query, source.tenancy)
    secret_routes.mount(app, query)
    if storage is not None:
        vfolder_routes.mount(app, storage, source.tenancy)
    export_routes.mount(app, query, utc)
    health_routes.mount(app, query, health or tuple, snapshots)
    console.mount(app)
    ui.mount(app, query, door, source.wait_beyond, stop, source.tenancy)
    return app


def _reads(source: ReadSource) -> Ask[Any]:
    """How each route reads ``source``: ``fn`` on a DuckDB connection of its own, in a
    worker thread."""

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

    return query


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
