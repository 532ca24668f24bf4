"""Run the projector and the read API (with the console) in the caller's task group.

Only one process may open a DuckDB file for writing, so the API lives beside the projector
that writes the file, and reads it through cursors of the same database.
"""

import contextlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog
import uvicorn
from anyio.abc import TaskStatus

from events import LogHealth
from projections import ProjectionStore, Projector, SchemaMismatch
from services.api.app import create_app
from services.api.auth import TokenSigner
from services.api.browser import ActAs
from services.api.guard import AccessRecorder
from services.api.health_routes import Snapshots
from services.api.vfolder_routes import Storage
from services.ports import EventLog, FolderStore

__all__ = ["ReadApi", "open_store", "serve_read_api"]

log = structlog.get_logger()
SCAN_EVERY_S = 300.0  # how often the storage service counts what every folder holds


@dataclass(frozen=True)
class ReadApi:
    """Where the read API listens, once it is ready."""

    url: str  # http://host:port
    db_path: str
    projector: Projector
    apps_url: str | None = None  # the apps origin (http://host:port), if served

    @property
    def api(self) -> str:
        return f"{self.url}/v1"

    @property
    def console(self) -> str:
        return f"{self.url}/console"

    @property
    def ui(self) -> str:
        return f"{self.url}/"

    @property
    def openapi(self) -> str:
        return f"{self.url}/openapi.json"


def open_store(path: str | Path, identity: str | None = None) -> ProjectionStore:
    """The store at ``path``, of the log ``identity`` (``EventLog.identity``).

    A store of another schema version, or of another log, is started afresh: it is only
    ever a projection, which the log rebuilds. Tables of a store that named no log yet are
    taken to be of this one. Blocks. Raises StoreLocked.
    """
    try:
        store = ProjectionStore(path, threads=1)
    except SchemaMismatch as e:
        log.warning("projections.schema_changed", path=str(path), error=str(e))
        store = _afresh(path)
    if identity is None:
        return store
    found = store.log_identity()
    if found is not None and found != identity:
        log.warning("projections.other_log", path=str(path), was=found, now=identity)
        store.close()
        store = _afresh(path)
    if found != identity:
        store.set_log_identity(identity)
    return store


def _log_health(
    store: ProjectionStore, live: Callable[[], LogHealth | None] | None
) -> list[tuple[LogHealth, bool]]:
    """Each server's latest ``log.health`` the projections folded, but where the watcher
    beside one found something now (``live``): that, marked so."""
    found = {server: (h, False) for server, h in store.state.log_space.items()}
    now = None if live is None else live()
    if now is not None:
        found[now.server] = (now, True)
    return list(found.values())


def _afresh(path: str | Path) -> ProjectionStore:
    for stale in (Path(path), Path(f"{path}.wal")):
        stale.unlink(missing_ok=True)
    return ProjectionStore(path, threads=1)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the caller's task group decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _server(app: Any) -> _Server:
    """A server of ``app``, loaded, to be started on a socket of the caller's."""
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        ws="wsproto",  # the web terminal's and the apps' WebSockets (a declared dependency)
        timeout_graceful_shutdown=5,
    )
    config.load()
    server = _Server(config)
    server.lifespan = config.lifespan_class(config)
    return server


async def _serve_apps(apps: Any, sock: socket.socket) -> None:
    """The apps origin on ``sock`` until cancelled (with the read API)."""
    server = _server(apps)
    await server.startup(sockets=[sock])
    try:
        await server.main_loop()
    finally:
        with anyio.CancelScope(shield=True):
            await server.shutdown(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_read_api(
    events: EventLog,
    db_path: str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    signer: TokenSigner | None = None,
    recorder: AccessRecorder | None = None,
    vfolders: FolderStore | None = None,
    live_health: Callable[[], LogHealth | None] | None = None,
    snapshots: Snapshots | None = None,
    act: ActAs | None = None,
    apps_port: int | None = None,
    task_status: TaskStatus[ReadApi] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Project the log into ``db_path`` and serve the read API on ``host:port`` (0: any
    free port), until cancelled. Signals readiness with the ``ReadApi`` (its URL) once the
    projections have caught up with the log and the server listens.

    ``signer`` signs the API's tokens (a fresh key if None); ``recorder`` hears of
    sign-ins and refusals (the caller runs it: ``AccessAudit``). With ``vfolders`` it is
    also the storage service of the virtual folders there (their scans appended to
    ``events``), and deletes the files of folders purged from the trash. ``live_health``:
    what the watcher beside the log's server finds now, laid over what the log holds;
    ``snapshots``: the actors' snapshots' health, for ``/v1/status``; ``act``: how the web
    UI connects to the bus as a signed-in user (None: the UI reads, and writes nothing);
    ``apps_port``: where the apps origin listens on ``host`` (0: any free port; None: no
    apps are served), the sessions' apps relayed through it (``app_proxy.py``).

    Raises StoreLocked if another process has the file open, OSError if the port is taken.
    """
    identity = await events.identity()
    store = await anyio.to_thread.run_sync(open_store, str(db_path), identity)
    try:
        projector = Projector(events, store)
        closing = anyio.Event()
        storage = None if vfolders is None else Storage(vfolders, events)
        app = create_app(
            projector,
            closing=closing,
            signer=signer,
            recorder=recorder,
            storage=storage,
            health=lambda: _log_health(store, live_health),
            snapshots=snapshots,
            act=act,
        )
        sock = _listen(host, port)
        bound = sock.getsockname()[1]
        server = _server(app)
        shown = f"[{host}]" if ":" in host else host
        apps_url = None
        if apps_port is not None:
            apps_sock = _listen(host, apps_port)
            app.state.apps_port = apps_sock.getsockname()[1]
            apps_url = f"http://{shown}:{app.state.apps_port}"
        async with anyio.create_task_group() as tg:
            await tg.start(projector.run)
            if storage is not None:
                tg.start_soon(storage.reap, projector.tenancy, projector.wait_beyond)
                tg.start_soon(storage.scan_all, projector.tenancy, SCAN_EVERY_S)
            await server.startup(sockets=[sock])
            if apps_port is not None:
                tg.start_soon(_serve_apps, app.state.apps, apps_sock)
            api = ReadApi(f"http://{shown}:{bound}", str(db_path), projector, apps_url)
            task_status.started(api)
            try:
                await server.main_loop()
            finally:
                with anyio.CancelScope(shield=True):
                    closing.set()  # event streams end, so their connections can close
                    await server.shutdown(sockets=[sock])
                    await app.state.guard.browsers.aclose()  # users' connections
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(store.close)
