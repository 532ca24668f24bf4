"""``fgpu up`` (everything in one process), ``fgpu agent|scheduler|quota|api`` (one each),
and ``sim_agents`` (``fgpu sim agents``, which ``sim_cmd`` puts in its group). Their wiring
is imported when a command runs, not before: the other commands do not pay for it."""

import dataclasses
import enum
import functools
import inspect
import os
import tempfile
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli.home import home_hint, private_process
from services.cli.options import (
    Settings,
    default_archive_dir,
    default_vfolder_root,
    fail,
    out,
    resolve_nats,
    run_async,
    state_file,
    warn,
)
from services.domain.intake import DEFAULT_BURST, DEFAULT_RATE
from services.domain.log_space import DEFAULT_LOW_SPACE
from services.runtime_tuning import tune_gc

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import anyio.abc

    from services.actors.agent import AgentConfig
    from services.actors.bootstrap import FirstAdmin
    from services.adapters.nats_auth import ServerAuth
    from services.adapters.nats_server import NatsServer
    from services.adapters.sealed_box import SealedBoxKey
    from services.adapters.store_lock import StoreLock
    from services.cli.stack import StackInfo
    from services.domain.log_space import Watermark
    from services.ports import Retention, SliceRegions
    from services.wiring.identity import Identity
    from services.wiring.stack import OwnServer, ServePart, StackConfig

__all__ = ["SECRETS_KEY_FILE", "AgentOptions", "app", "sim_agents"]

SECRETS_KEY_FILE = "secrets.key"  # in the store: the cluster's secrets key (0600)


class ServeProxy(enum.StrEnum):
    HAPROXY = "haproxy"
    MEMORY = "memory"


AgentIdOpt = Annotated[str | None, typer.Option(help="This agent's id (default: host name).")]
MockOpt = Annotated[
    int, typer.Option(help="Declare N mock GPUs instead of discovering them with NVML.")
]
GpuMemOpt = Annotated[str, typer.Option(help="Memory of each mock GPU.")]
RatioOpt = Annotated[
    str | None, typer.Option(help="fGPU one physical GPU is worth (admin setting; default 1).")
]
CpuOpt = Annotated[str | None, typer.Option(help="CPU cores offered (default: all).")]
MemOpt = Annotated[str | None, typer.Option(help="Memory offered (default: all).")]
RuntimeOpt = Annotated[
    str | None, typer.Option(help="docker (default) or dummy (instant fake, for simulation).")
]
ConfigOpt = Annotated[Path | None, typer.Option(help="Agent configuration file (TOML).")]
GroupOpt = Annotated[
    str | None, typer.Option(help="The resource group it serves (default: default).")
]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        help="host:port of a registry to pull missing images from (only images named "
        "HOST:PORT/...; default: pull nothing)."
    ),
]
ShimOpt = Annotated[
    str | None,
    typer.Option(help="Directory of the built shim (libcuda.so.1); default: gpu_shim/build/lib."),
]
NoShimOpt = Annotated[bool, typer.Option("--no-shim", help="Do not enforce slices with the shim.")]
RegionsOpt = Annotated[
    str | None,
    typer.Option(help="Where the shim's per-session regions live (default: $FGPU_HOME/regions)."),
]
MpsOpt = Annotated[
    str | None,
    typer.Option(
        help="Run NVIDIA MPS on these GPUs: 'all' or indexes, 0,1 (default: none, "
        "time-slicing). The agent runs a control daemon per GPU and will not start if one "
        "cannot run; a session on one such GPU alone is its client, held to its slice.",
    ),
]
SecretsKeyOpt = Annotated[
    Path | None,
    typer.Option(
        help="The cluster's secrets key file, which opens the secrets sessions refer to "
        "(fgpu up: default <store>/secrets.key, made once; fgpu agent: a copy of it, 0600; "
        "none: a session that refers to a secret ends in error here).",
    ),
]

VfolderRootOpt = Annotated[
    str | None,
    typer.Option(
        help="Where the virtual folders are on this host, <root>/<storage host>/<id> "
        "(default: $FGPU_HOME/vfolders; a shared filesystem when agents are on several hosts)."
    ),
]
AppsPortOpt = Annotated[
    int, typer.Option(help="Port of the web UI's apps, an origin of their own (0: a free one).")
]
ServePortOpt = Annotated[
    int,
    typer.Option(
        min=0, max=65535, help="Port of the endpoints' proxy, on loopback (0: a free one)."
    ),
]
ServeProxyOpt = Annotated[
    ServeProxy,
    typer.Option(
        help="The proxy: haproxy (the memory one, said once, if haproxy is missing) or "
        "memory (a Python proxy, for tests and trials)."
    ),
]
NoServeOpt = Annotated[
    bool, typer.Option("--no-serve", help="No proxy, no router: endpoints are not reached.")
]
StorageUidOpt = Annotated[
    str | None,
    typer.Option(
        "--storage-uid",
        envvar="FGPU_STORAGE_UID",
        help="UID[:GID] the virtual folders are kept as and their storage service runs "
        "as, never 0 (numbers; no /etc/passwd entry needed). Default, as root: the owner "
        "of the folders' root if not root, else 61000; as another user: that user.",
    ),
]
StorageHostOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-host",
        help="A storage host whose folders are under the root here (again for more; "
        "default: every one). Sessions mounting folders of other hosts go to other agents.",
    ),
]


@dataclasses.dataclass(frozen=True)
class AgentOptions:
    """The command-line options of a command that runs an agent (``fgpu up``, ``fgpu agent``),
    listed once: ``_with_agent_options`` puts them on each such command."""

    agent_id: AgentIdOpt = None
    mock_gpus: MockOpt = 0
    gpu_mem: GpuMemOpt = "16g"
    fgpu_per_gpu: RatioOpt = None
    cpu: CpuOpt = None
    mem: MemOpt = None
    runtime: RuntimeOpt = None
    config: ConfigOpt = None
    group: GroupOpt = None
    shim_dir: ShimOpt = None
    no_shim: NoShimOpt = False
    regions_dir: RegionsOpt = None
    registry: RegistryOpt = None
    vfolder_root: VfolderRootOpt = None
    storage_host: StorageHostOpt = None
    mps: MpsOpt = None
    secrets_key: SecretsKeyOpt = None

    @property
    def vfolders(self) -> str:
        """The virtual folders' root, the default if none was given."""
        return str(Path(self.vfolder_root or default_vfolder_root()).resolve())

    def setup(self) -> "tuple[AgentConfig, SliceRegions | None]":
        """The agent's configuration and regions; a clear error if an option is bad."""
        from services.cli.agent_setup import agent_config, with_regions

        try:
            cfg = agent_config(
                self.agent_id, self.mock_gpus, self.gpu_mem, self.fgpu_per_gpu,
                self.cpu, self.mem, self.runtime, self.config, self.group, self.registry,
                self.mps,
            )  # fmt: skip
        except ValueError as e:
            fail(str(e))
        from events import subjects as subj

        hosts = self.storage_host or cfg.storage_hosts  # the option, else the file's
        for host in hosts or ():
            if not subj.is_token(host):
                fail(f"--storage-host {host!r} must be 1-64 letters, digits, '-' or '_'")
        cfg = dataclasses.replace(
            cfg,
            vfolder_root=self.vfolders,
            storage_hosts=None if hosts is None else tuple(dict.fromkeys(hosts)),
        )
        return with_regions(cfg, self.shim_dir, self.no_shim, self.regions_dir)


def _with_agent_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command``, whose ``agent: AgentOptions`` parameter is given on the command line as
    AgentOptions' fields, each an option of its own (they come first in ``--help``)."""
    fields = dataclasses.fields(AgentOptions)
    keyword = inspect.Parameter.KEYWORD_ONLY
    own = inspect.signature(command)
    params = [
        inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type) for f in fields
    ] + [p.replace(kind=keyword) for p in own.parameters.values() if p.name != "agent"]

    @functools.wraps(command)
    def with_options(**given: Any) -> None:
        command(agent=AgentOptions(**{f.name: given.pop(f.name) for f in fields}), **given)

    with_options.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    return with_options


async def _until_signalled(tg: "anyio.abc.TaskGroup") -> None:
    import anyio

    stop = anyio.Event()
    await _signalled(stop)
    tg.cancel_scope.cancel()


async def _signalled(stop: "anyio.Event") -> None:
    """Set ``stop`` at the first SIGTERM or SIGINT."""
    import signal

    import anyio

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop.set()
            return


@asynccontextmanager
async def _until_stopped() -> "AsyncIterator[anyio.Event]":
    """An event set at the first SIGTERM or SIGINT, for a block that waits for it and then
    returns: a ``Stack`` stops its parts as the block is left (``Stack.running``)."""
    import anyio

    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_signalled, stop)
        yield stop
        tg.cancel_scope.cancel()


ArchiveOpt = Annotated[
    Path | None,
    typer.Option(help="The log's archive directory (default: beside the store of `fgpu up`)."),
]
RetainEventsOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Keep at most this many events in the stream; older ones are archived "
        "(Parquet, read back) and only then removed. Set when the stream is made.",
    ),
]
RetainDaysOpt = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        help="Keep no event older than this many days in the stream; older ones are "
        "archived first. Set when the stream is made.",
    ),
]


def retention_of(events: int | None, days: float | None) -> "Retention | None":
    """The Retention the options ask for; None: keep everything in the stream for good."""
    from services.ports import Retention

    if events is None and days is None:
        return None
    return Retention(events, None if days is None else days * 86400)


LostGraceOpt = Annotated[
    float,
    typer.Option(
        min=0,
        help="Seconds a lost agent's running sessions are kept before they end ERROR "
        "(agent lost) and free their shares.",
    ),
]


def _storage_owner(given: str | None) -> tuple[int, int] | None:
    """--storage-uid as (uid, gid); None if not given. Exits on a bad value."""
    if given is None:
        return None
    uid, _, gid = given.partition(":")
    if not uid.isdigit() or not (gid.isdigit() or not gid) or int(uid) >= 2**32 - 1:
        fail(f"--storage-uid {given!r}: UID or UID:GID, in numbers")
    if int(uid) == 0:
        fail("--storage-uid: not 0: the folders are never kept, nor served, as root")
    return int(uid), int(gid or uid)


def _watermark(spec: str) -> "Watermark":
    """--low-space as a Watermark; exits 2 with one line if it is none."""
    from services.domain.log_space import Watermark

    try:
        return Watermark.parse(spec)
    except ValueError as e:
        fail(str(e))


def _url(ctx: typer.Context) -> str:
    """The NATS URL, with nats-py imported for it: without its websocket transport (and
    so without aiohttp, a fifth of a daemon's start) unless the URL is a ws:// one. Call
    it before importing the wiring, which imports nats-py."""
    from services.adapters.nats_import import import_nats_client

    settings: Settings = ctx.obj
    url = resolve_nats(settings.nats)
    import_nats_client(websockets=url.startswith(("ws://", "wss://")))
    return url


@_with_agent_options
def up(
    agent: AgentOptions,
    store: Annotated[
        str | None,
        typer.Option(help="JetStream store directory (default: $FGPU_HOME/store, kept)."),
    ] = None,
    ephemeral: Annotated[
        bool,
        typer.Option(help="A throwaway store, removed when fgpu up stops: no history kept."),
    ] = False,
    port: Annotated[int | None, typer.Option(help="NATS port (default: a free one).")] = None,
    api_port: Annotated[
        int, typer.Option(help="Port of the read API and console (0: a free one).")
    ] = 0,
    apps_port: AppsPortOpt = 0,
    no_api: Annotated[bool, typer.Option("--no-api", help="No projector, no read API.")] = False,
    serve_port: ServePortOpt = 0,
    serve_proxy: ServeProxyOpt = ServeProxy.HAPROXY,
    no_serve: NoServeOpt = False,
    storage_uid: StorageUidOpt = None,
    lost_grace: LostGraceOpt = 600.0,
    retain_events: RetainEventsOpt = None,
    retain_days: RetainDaysOpt = None,
    archive_every: Annotated[
        float, typer.Option(min=0.1, help="Seconds between the archiver's passes.")
    ] = 60.0,
    snapshot_events: Annotated[
        int,
        typer.Option(
            min=1,
            help="The scheduler and quota keep a snapshot every this many events (and "
            "every 5 minutes with some).",
        ),
    ] = 50_000,
    low_space: Annotated[
        str,
        typer.Option(
            help="The log's disk is low under this much free: a share of it, an amount, or "
            "both (the smaller holds). Low, no new session is admitted; it does not start.",
        ),
    ] = DEFAULT_LOW_SPACE,
) -> None:
    """Start an embedded NATS server and every actor in this process, until Ctrl-C or
    `fgpu down`. The log is kept in the store: the next `fgpu up` resumes its history and
    re-adopts the containers still running."""
    from services.adapters.store_lock import Process
    from services.cli.stack import StackInfo

    watermark = _watermark(low_space)
    if ephemeral and store:
        fail("give --store or --ephemeral, not both")
    private_process()  # its store, projections and keys hold every tenant's history
    vfolder_owner = _storage_owner(storage_uid)
    store_dir, lock, home_lock = _claim_store(store, ephemeral, watermark)
    cfg, regions = agent.setup()
    serve = None if no_serve else _serve_part(serve_proxy, serve_port)
    _stop_orphan(lock, store_dir)
    kept = any((store_dir / "jetstream").iterdir()) if (store_dir / "jetstream").is_dir() else False
    auth = _server_auth(store_dir)
    server = _start_server(store_dir, port, auth)
    me = Process.me()
    info = StackInfo(server.url, server.store_dir, cfg.agent_id, me.pid, started=me.started)
    info.save()
    history = "throwaway, removed at stop" if ephemeral else "resumed" if kept else "new, kept"
    _say_up(server.url, f"{server.store_dir}: {history}", cfg)
    retention = retention_of(retain_events, retain_days)
    own = _own_server(server, auth, watermark, retention, agent.secrets_key)
    stack = _up_stack(own, cfg, regions, vfolder_owner, None if no_api else api_port, apps_port)
    stack = dataclasses.replace(
        stack,
        lost_grace_s=lost_grace,
        snapshot_events=snapshot_events,
        archive_every_s=archive_every,
        serve=serve,
    )
    stop = functools.partial(_stop_up, server, [home_lock, lock], store_dir if ephemeral else None)
    _run_up(stack, info, api_port, stop)


def _serve_part(kind: ServeProxy, port: int) -> "ServePart":
    """The router and its proxy on loopback ``port``: HAProxy, else (asked for, or no
    haproxy here, said once) the Python one. Exits 1 if another process listens on
    ``port``, before anything starts (HAProxy's own words for it are no help)."""
    import errno
    import socket

    from services.adapters.haproxy_proxy import HaproxyError, find_haproxy, haproxy_proxy
    from services.testing.memory_proxy import memory_proxy
    from services.wiring.stack import ServePart

    if port:
        try:
            with socket.create_server(("127.0.0.1", port)):
                pass
        except OSError as e:
            why = "another process does" if e.errno == errno.EADDRINUSE else str(e)
            fail(f"cannot listen on 127.0.0.1:{port}: {why}: give another --serve-port", code=1)

    if kind is ServeProxy.HAPROXY:
        try:
            find_haproxy()
            return ServePart(functools.partial(haproxy_proxy, port=port or None))
        except HaproxyError as e:
            warn(f"{e}; serving endpoints through the Python proxy instead")
    return ServePart(functools.partial(memory_proxy, port))


def _claim_store(
    store: str | None, ephemeral: bool, watermark: "Watermark"
) -> tuple[Path, "StoreLock", "StoreLock | None"]:
    """The store's directory, held with the home's, with room for the log. Nothing of a
    store or a home another holds is touched (its up.json, its server): the locks come
    first, and a refused second `fgpu up` says only why."""
    from services.cli.preflight import hold_home, hold_store, room_for_the_log, writable

    home = writable(state_file().parent, home_hint())
    store_dir = _store_dir(home, store, ephemeral)
    lock = hold_store(store_dir)
    home_lock = hold_home(home, store_dir)
    room_for_the_log(store_dir, watermark)
    return store_dir, lock, home_lock


def _run_up(
    stack: "StackConfig", info: "StackInfo", api_port: int, stop: Callable[[], None]
) -> None:
    """Run ``stack`` until signalled, then ``stop``, whatever happened; exits 1 with the
    reason if it could not start."""
    from services.adapters.haproxy_proxy import HaproxyError
    from services.adapters.vfolder_files import HelperFailed
    from services.ports import MpsUnavailable
    from services.wiring.stack import StreamRefused

    try:
        tune_gc()
        passing = (StreamRefused, MpsUnavailable, HaproxyError)
        run_async(functools.partial(_serve_up, stack, info, api_port), passing=passing)
    except (HelperFailed, StreamRefused, MpsUnavailable, HaproxyError) as e:
        fail(str(e), code=1)
    finally:
        stop()


def _stop_up(server: "NatsServer", locks: "list[StoreLock | None]", throwaway: Path | None) -> None:
    """After the actors: the server stopped, the state file removed (ours: the home's
    lock is held), the locks released in turn, a throwaway store removed."""
    import shutil

    server.stop()
    state_file().unlink(missing_ok=True)
    for held in locks:
        if held is not None:
            held.release()
    if throwaway is not None:
        shutil.rmtree(throwaway, ignore_errors=True)
    out().print("fgpu up: stopped")


def _store_dir(home: Path, store: str | None, ephemeral: bool) -> Path:
    """The store ``fgpu up`` keeps its log in: a new throwaway one, ``store``, or the
    home's; exits 1 if it may not write there."""
    from services.cli.preflight import writable

    if ephemeral:
        return Path(tempfile.mkdtemp(prefix="fgpu-nats-"))
    store_dir = (Path(store) if store else home / "store").resolve()
    writable(store_dir, "give --store a directory you may write" if store else home_hint())
    return store_dir


def _stop_orphan(lock: "StoreLock", store_dir: Path) -> None:
    """Stop the nats-server an ``fgpu up`` that died left on ``store_dir``, saying so;
    exits 1 if a live process serves it."""
    from services.adapters.store_lock import StoreInUse, stop_orphan

    try:
        orphan = stop_orphan(lock)
    except StoreInUse as e:
        fail(str(e), code=1)
    if orphan is not None:
        warn(f"stopped nats-server {orphan}, left running on {store_dir} by an fgpu up that died")


def _start_server(store_dir: Path, port: int | None, auth: "ServerAuth") -> "NatsServer":
    """nats-server on ``store_dir``, dying with this process; exits 1 with its reason if
    it does not start."""
    from services.adapters import nats_server

    try:
        return nats_server.start(str(store_dir), port, config=auth.config(), die_with_parent=True)
    except nats_server.PortInUse as e:
        fail(f"{e}: give another --port (none: a free one)", code=1)
    except nats_server.NatsServerError as e:
        fail(str(e), code=1)


def _say_up(url: str, store: str, cfg: "AgentConfig") -> None:
    """``fgpu up``'s first lines: its server, its store, its agent, its state file."""
    console = out()
    console.print(f"[bold]fgpu up[/]  NATS {url}  (JetStream store {store})")
    console.print(
        f"  agent {cfg.agent_id}: {len(cfg.gpus)} GPU(s)"
        f"{' (mock)' if cfg.mock_gpus else ''}, 1 GPU = "
        f"{cfg.fgpu_per_gpu / 100:g} fGPU, runtime {cfg.runtime_name}"
    )
    console.print(f"  state file {state_file()}  (other fgpu commands find NATS and the API there)")


def _own_server(
    server: "NatsServer",
    auth: "ServerAuth",
    watermark: "Watermark",
    retention: "Retention | None",
    key: Path | None = None,
) -> "OwnServer":
    """``server`` as ``fgpu up`` administers it: the services' keypairs kept in its store,
    a new cluster's superadmin's as this host's CLI's credentials, the secrets key in
    ``key`` (None: the store's, made there once)."""
    from services.cli.identities import service_keys
    from services.wiring.stack import OwnServer

    store = Path(server.store_dir)
    return OwnServer(
        server,
        auth,
        service_keys=lambda log, kinds: service_keys(log, store, kinds),
        watermark=watermark,
        retention=retention,
        first_admin=_keep_first_admin,
        secrets_key=_secrets_key(key or store / SECRETS_KEY_FILE, make=key is None),
    )


def _secrets_key(path: Path, *, make: bool = False) -> "SealedBoxKey":
    """The cluster's secrets key in ``path`` (made there, 0600, if ``make`` and there is
    none); exits 1 with one line if it cannot be read."""
    from services.adapters.sealed_box import KeyFileInvalid, SealedBoxKey

    try:
        return SealedBoxKey.load_or_create(path) if make else SealedBoxKey.load(path)
    except (KeyFileInvalid, OSError) as e:
        fail(f"the secrets key: {e}", code=1)


def _up_stack(
    own: "OwnServer",
    cfg: "AgentConfig",
    regions: "SliceRegions | None",
    vfolder_owner: tuple[int, int] | None,
    api_port: int | None,
    apps_port: int = 0,
) -> "StackConfig":
    """The whole stack on ``own``'s server, its read API on ``api_port`` (None: none),
    the web UI's apps on ``apps_port``."""
    from projections.paths import default_db_path
    from services.cli.agent_setup import container_runtime, mps_daemons
    from services.wiring.stack import AgentPart, ApiPart, StackConfig

    store = Path(own.server.store_dir)
    api = None
    if api_port is not None:
        # The projections live with the log they project: a new store, a new file.
        db = default_db_path(store)
        api = ApiPart(db, "127.0.0.1", api_port, cfg.vfolder_root, vfolder_owner, apps_port)
    runtime = functools.partial(container_runtime, cfg.runtime_name)
    return StackConfig(
        own.server.url,
        archive_dir=store / "archive",  # the archive lives with its log
        own=own,
        agent=AgentPart(
            cfg,
            runtime,
            regions,
            output_root=state_file().parent / "output",
            mps=mps_daemons(cfg),
            secrets=own.secrets_key,
        ),
        api=api,
    )


async def _serve_up(config: "StackConfig", info: "StackInfo", api_port: int) -> None:
    """The stack of ``config`` until signalled; its read API said in ``info`` too."""

    from services.cli.preflight import port_taken
    from services.wiring.stack import Stack

    async with _until_stopped() as stop, AsyncExitStack() as running:
        with port_taken("127.0.0.1", api_port, "--api-port"):
            started = await running.enter_async_context(Stack(config).running())
        console = out()
        if started.api is not None:
            info.api_url = started.api.url
            info.save()
            console.print(
                f"  read API {started.api.api}  (OpenAPI {started.api.openapi})",
                highlight=False,
            )
            console.print(f"  console  {started.api.console}", highlight=False)
            console.print(f"  web UI   {started.api.ui}", highlight=False)
            console.print(f"  apps     {started.api.apps_url}  (the UI's apps)", highlight=False)
        if started.proxy is not None:
            host, port = started.proxy.address
            info.serve_url = f"http://{host}:{port}"
            info.save()
            console.print(f"  serving  {info.serve_url}/e/<endpoint>/", highlight=False)
        console.print("[green]ready[/]  (Ctrl-C to stop)", highlight=False)
        await stop.wait()


def down(
    timeout: Annotated[float, typer.Option(help="Seconds to wait for it to stop.")] = 60.0,
) -> None:
    """Stop the `fgpu up` of this host ($FGPU_HOME): its actors, then its server. The
    containers of running sessions keep running; the next `fgpu up` re-adopts them."""
    import json
    import signal
    import time

    from services.adapters.store_lock import Process, alive

    path = state_file()
    try:
        said = json.loads(path.read_text())
        started = said.get("started")
        owner = Process(int(said["pid"]), started if isinstance(started, int) else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        fail(f"fgpu up is not running here ({path} names none)", code=1)
    pid = owner.pid
    try:
        # A pid that another process took since is no fgpu up's: it gets no signal.
        if not owner.runs():
            raise ProcessLookupError
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
        fail(f"fgpu up (pid {pid}) is not running: its state file was stale", code=1)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        fail(f"fgpu up (pid {pid}) did not stop within {timeout:g} s", code=1)
    out().print(f"fgpu up (pid {pid}) stopped")


def _server_auth(store: Path) -> "ServerAuth":
    """The server's secrets kept in ``store`` (new ones for a new store)."""
    from services.adapters.nats_auth import ServerAuth

    try:
        return ServerAuth.load(store)
    except (OSError, ValueError):
        auth = ServerAuth.generate()
        auth.save(store)
        return auth


def _keep_first_admin(first: "FirstAdmin") -> None:
    """A new cluster's superadmin's keypair stored as the one this host's CLI speaks as
    (the secret shown nowhere else)."""
    from services.cli.credentials import Credentials, save

    path = save(Credentials(first.access_key, first.secret))
    out().print(f"  superadmin {first.user}: keypair {first.access_key} stored in {path}")


@_with_agent_options
def agent_cmd(ctx: typer.Context, agent: AgentOptions) -> None:
    """Run one agent against --nats URL: it runs the sessions placed on this node."""

    from services.cli.agent_setup import container_runtime, mps_daemons
    from services.cli.preflight import writable

    url = _url(ctx)
    from services.wiring.stack import AgentPart, Stack, StackConfig

    private_process()  # its state (sessions' kept output, regions) is its user's alone
    writable(state_file().parent, home_hint())  # where it keeps sessions' output
    cfg, regions = agent.setup()
    runtime = functools.partial(container_runtime, cfg.runtime_name)
    output = state_file().parent / "output"
    opener = None if agent.secrets_key is None else _secrets_key(agent.secrets_key)
    part = AgentPart(
        cfg, runtime, regions, output_root=output, mps=mps_daemons(cfg), secrets=opener
    )

    async def main() -> None:
        config = StackConfig(url, identities={part.kind: _me(ctx, part.kind)}, agent=part)
        async with _until_stopped() as stop, Stack(config).running():
            out().print(f"agent {cfg.agent_id} ready on {url}")
            await stop.wait()

    from services.ports import MpsUnavailable

    tune_gc()
    try:
        run_async(main, passing=(MpsUnavailable,))
    except MpsUnavailable as e:
        fail(str(e), code=1)


def api(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: a free one).")] = 8080,
    apps_port: AppsPortOpt = 0,
    db: Annotated[
        Path | None,
        typer.Option(help="The projections' DuckDB file (default: $FGPU_HOME/projections.duckdb)."),
    ] = None,
    archive: ArchiveOpt = None,
    vfolder_root: VfolderRootOpt = None,
    storage_uid: StorageUidOpt = None,
) -> None:
    """Run the projector and the read API (with the console) against --nats URL, and the
    storage service of the virtual folders under --vfolder-root.

    For a deployment where they live apart from the actors; users point --api or
    FGPU_API here. With the log's archive (--archive), a new projection reads the
    history that left the stream too."""

    from projections.paths import default_db_path
    from services.cli.preflight import writable

    url = _url(ctx)
    from services.wiring.stack import ApiPart, Stack, StackConfig

    private_process()  # the projections hold every tenant's history
    path = db or default_db_path(state_file().parent)
    writable(path.parent, "give --db a file in a directory you may write" if db else home_hint())
    root = str(Path(vfolder_root or default_vfolder_root()).resolve())
    owner = _storage_owner(storage_uid)

    async def main() -> None:
        config = StackConfig(
            url,
            archive_dir=archive or default_archive_dir(),
            identities={"api": _me(ctx, "api")},
            api=ApiPart(
                path, host, port, vfolder_root=root, vfolder_owner=owner, apps_port=apps_port
            ),
        )
        async with _until_stopped() as stop, Stack(config).running() as started:
            served = started.api
            assert served is not None  # the one part it runs
            console = out()
            console.print(f"read API {served.api}  (OpenAPI {served.openapi})", highlight=False)
            console.print(f"console  {served.console}", highlight=False)
            console.print(f"web UI   {served.ui}", highlight=False)
            console.print(f"apps     {served.apps_url}  (the UI's apps)", highlight=False)
            console.print(f"[green]ready[/]  projecting {url} into {path}", highlight=False)
            await stop.wait()

    from projections import StoreLocked
    from services.adapters.vfolder_files import HelperFailed

    try:
        run_async(main)
    except HelperFailed as e:
        fail(str(e), code=1)
    except StoreLocked as e:
        fail(f"{e}: another projector has {path} open; give --db another file", code=1)
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e}", code=1)


DurableOpt = Annotated[
    str | None,
    typer.Option(
        help="Its cursor on the log: NAME, NAME-2, NAME-3 or NAME-4 (default: NAME, the "
        "actor's kind), the only ones its keypair may use; each of several needs its own."
    ),
]


def _durable(kind: str, given: str | None) -> str:
    """The durable consumer ``given`` (None: the kind's first), if a ``kind`` service's
    permissions name it; else exit 2 naming those they do."""
    from services.domain.access.permissions import durables

    names = durables(kind)
    name = given or names[0]
    if name not in names:
        fail(
            f"--durable {name}: a {kind} follows the log through {', '.join(names)}, "
            "the only cursors its keypair may use"
        )
    return name


def sim_agents(
    ctx: typer.Context,
    count: Annotated[int, typer.Option(min=1, help="How many agents.")] = 1000,
    gpus: Annotated[int, typer.Option(min=1, help="Mock GPUs per agent.")] = 4,
    gpu_mem: GpuMemOpt = "80g",
    fgpu_per_gpu: Annotated[str, typer.Option(help="fGPU per GPU.")] = "4",
    prefix: Annotated[str, typer.Option(help="Agent ids are PREFIX-N.")] = "sim",
    start_delay: Annotated[float, typer.Option(help="Seconds a container takes to start.")] = 0.0,
    durable: DurableOpt = None,
) -> None:
    """Run COUNT simulated agents (dummy runtime: containers start instantly), as the
    agent-host service's keypair where service keys are given."""
    import anyio

    from events import Slots
    from services.actors.agent import AgentConfig
    from services.adapters.dummy_runtime import DummyRuntime
    from services.adapters.gpu_probe import MockGpus
    from services.domain.resources import InvalidAmount, parse_fgpu, parse_mem

    url = _url(ctx)
    from services.wiring.parts import connected, run_agent_host

    durable = _durable("agent-host", durable)
    try:
        ratio, mem_each = parse_fgpu(fgpu_per_gpu), parse_mem(gpu_mem)
    except InvalidAmount as e:
        fail(str(e))
    configs = [
        AgentConfig(
            agent_id=f"{prefix}-{n}",
            capacity=Slots(cpu=256_000, mem=2048 << 30),
            gpus=tuple(MockGpus.uniform(gpus, model="SimGPU", mem=mem_each, sm_count=132).gpus()),
            fgpu_per_gpu=ratio,
            mock_gpus=True,
            runtime_name="dummy",
        )
        for n in range(count)
    ]

    async def main() -> None:
        me = _me(ctx, "agent-host")
        async with (
            connected(url, f"fgpu-sim-{prefix}", me) as conn,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_until_signalled, tg)
            runtime = functools.partial(DummyRuntime, start_delay_s=start_delay)
            await tg.start(
                functools.partial(run_agent_host, durable=durable), conn, configs, runtime
            )
            out().print(f"{count} simulated agents ready on {url}")

    from services.ports import MpsUnavailable

    tune_gc()
    try:
        run_async(main, passing=(MpsUnavailable,))
    except MpsUnavailable as e:
        fail(str(e), code=1)


def scheduler(
    ctx: typer.Context,
    lost_grace: LostGraceOpt = 600.0,
    durable: DurableOpt = None,
    policy: Annotated[
        str,
        typer.Option(
            help="Where sessions go: best-fit, pack, spread, round-robin or "
            "fragmentation-aware (docs/scheduling.md)."
        ),
    ] = "best-fit",
) -> None:
    """Run the scheduler against --nats URL (as a scheduler's service keypair)."""
    from services.domain.scheduling.placement import POLICY_NAMES

    if policy not in POLICY_NAMES:
        fail(f"no placement policy {policy!r}; there are {', '.join(POLICY_NAMES)}")
    durable = _durable("scheduler", durable)
    _single(ctx, "scheduler", lost_grace_s=lost_grace, durable=durable, policy=policy)


def quota(ctx: typer.Context, durable: DurableOpt = None) -> None:
    """Run the quota actor against --nats URL (as a quota service keypair)."""
    _single(ctx, "quota", durable=_durable("quota", durable))


def registrar(ctx: typer.Context) -> None:
    """Run the registrar (it answers administrators' requests) against --nats URL."""
    _single(ctx, "registrar")


def serving(ctx: typer.Context) -> None:
    """Run the serving actor against --nats URL (as the serving service keypair): it
    answers serve requests and keeps each endpoint at its replicas. One at a time."""
    _url(ctx)  # nats-py imported for the URL before the wiring imports it
    import anyio

    from services.adapters.nats_connection import NatsConnection
    from services.wiring.parts import run_serving

    async def run(
        conn: NatsConnection,
        *,
        task_status: "anyio.abc.TaskStatus[Any]" = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        snapshots = conn.snapshots("scheduler")
        await run_serving(conn.log, snapshots=snapshots, task_status=task_status)

    _service(ctx, "serving", run)


def domain_feed(ctx: typer.Context) -> None:
    """Run the domain feed against --nats URL (as a domain-feed service keypair): it
    writes each domain's records of the log where the domain's reader keypairs read them.
    One at a time (a second writes the same records again, kept once)."""
    _url(ctx)  # nats-py imported for the URL before the wiring imports it
    from services.wiring.parts import run_domain_feed

    _service(ctx, "domain-feed", run_domain_feed)


def intake(
    ctx: typer.Context,
    rate: Annotated[
        float, typer.Option(min=0.001, help="Requests a second each access key may make.")
    ] = DEFAULT_RATE,
    burst: Annotated[int, typer.Option(min=1, help="Requests each key may make at once.")] = (
        DEFAULT_BURST
    ),
) -> None:
    """Run the intake against --nats URL (as an intake service keypair): it writes people's
    requests on the log, each key at its rate, and counts what it drops."""
    _url(ctx)  # nats-py imported for the URL before the wiring imports it
    from services.wiring.parts import run_intake

    _service(ctx, "intake", functools.partial(run_intake, rate=rate, burst=burst))


def _service(
    ctx: typer.Context, kind: str, run: "Callable[..., Coroutine[Any, Any, None]]"
) -> None:
    """Run ``run`` (given the connection as service ``kind``'s keypair) until signalled."""
    import anyio

    url = _url(ctx)
    from services.wiring.parts import connected

    async def main() -> None:
        async with (
            connected(url, f"fgpu-{kind}", _me(ctx, kind)) as conn,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_until_signalled, tg)
            await tg.start(run, conn)
            out().print(f"{kind} ready on {url}")

    run_async(main)


def gatekeeper(
    ctx: typer.Context,
    secrets_dir: Annotated[
        Path, typer.Option("--secrets", help="The server's secrets (fgpu admin server-auth).")
    ],
    server_log: Annotated[
        Path | None,
        typer.Option(
            help="The server's log file, where it runs beside the server: its permission "
            "violations go to the access audit."
        ),
    ] = None,
) -> None:
    """Run the gatekeeper (the server's auth callout) against --nats URL: it lets in live
    keypairs with their permissions and disconnects revoked ones; connections let in and
    refused (and the server's permission violations, with --server-log) go to the access
    audit. Several may run."""
    import anyio

    from services.adapters.nats_auth import ServerAuth

    url = _url(ctx)
    from services.wiring.parts import run_gatekeeper

    try:
        auth = ServerAuth.load(secrets_dir)
    except (OSError, ValueError) as e:
        fail(f"no server secrets in {secrets_dir}: {e}")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_signalled, tg)
            log = str(server_log) if server_log is not None else None
            await tg.start(run_gatekeeper, url, auth, log)
            out().print(f"gatekeeper ready on {url}")

    run_async(main)


def _me(ctx: typer.Context, service: str | None = None) -> "Identity":
    settings: Settings = ctx.obj
    return settings.identity(service)


def _single(
    ctx: typer.Context,
    which: str,
    *,
    lost_grace_s: float = 600.0,
    durable: str | None = None,
    policy: str = "best-fit",
) -> None:
    import anyio

    url = _url(ctx)
    from services.wiring.parts import connected, run_quota, run_registrar, run_scheduler

    async def main() -> None:
        async with (
            connected(url, f"fgpu-{which}", _me(ctx, which)) as conn,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_until_signalled, tg)
            if which == "scheduler":
                schedule = functools.partial(
                    run_scheduler,
                    lost_grace_s=lost_grace_s,
                    durable=durable or "scheduler",
                    policy=policy,
                    snapshots=conn.snapshots("scheduler"),
                )
                await tg.start(schedule, conn.log, conn.bus)
            elif which == "registrar":
                registrar = functools.partial(run_registrar, snapshots=conn.snapshots("scheduler"))
                await tg.start(registrar, conn.log)
            else:
                quota = functools.partial(
                    run_quota, durable=durable or "quota", snapshots=conn.snapshots("quota")
                )
                await tg.start(quota, conn.log)
            out().print(f"{which} ready on {url}")

    from services.ports import MpsUnavailable

    tune_gc()
    try:
        run_async(main, passing=(MpsUnavailable,))
    except MpsUnavailable as e:
        fail(str(e), code=1)


# No group of its own: main puts these beside its own commands, in this order (--help's).
app = typer.Typer()
app.command("up")(up)
app.command("down")(down)
app.command("agent")(agent_cmd)
app.command("scheduler")(scheduler)
app.command("quota")(quota)
app.command("registrar")(registrar)
app.command("serving")(serving)
app.command("intake")(intake)
app.command("domain-feed")(domain_feed)
app.command("gatekeeper")(gatekeeper)
app.command("api")(api)
