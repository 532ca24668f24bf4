"""The stack, wired once: the parts of fgpu (``services.wiring.parts``) on one NATS server,
each connection as its service's identity, started in the one order that works, from a
plain configuration. ``fgpu up`` runs all of it on the server it started; ``fgpu api``
and ``fgpu agent`` run one part each against a server someone else runs.

The order, and why:

1. the agent's container runtime, first: without an engine, one error before anything
   has connected; then its GPUs' MPS daemons, if it has MPS on any (stopped last);
2. on a server the stack owns, its administration: the stream made (or its retention
   updated), a new cluster's superadmin, keypairs for the services it runs;
3. the gatekeeper (everything else connects through it), in a task group that outlives
   the services' connections;
4. one connection per service, as its identity;
5. the parts, in a task group the connections outlive: the watch of the store's disk,
   then the actors (intake, domain feed, registrar, quota, scheduler, archiver), the
   agent, the router (its proxy started with the runtime, stopped after the parts: no
   proxy outlives the stack), and last the read API, so that it opens on a cluster that
   runs.

Stopping is the reverse, by cancellation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from services.actors.bootstrap import FirstAdmin, bootstrap, publish_secrets_key
from services.adapters.nats_connection import NatsConnection
from services.adapters.system_clock import SystemClock
from services.ports import (
    ContainerRuntime,
    EventLog,
    LogError,
    MpsControl,
    Retention,
    SecretOpener,
    SliceRegions,
)
from services.wiring.identity import Identity
from services.wiring.parts import (
    connected,
    run_agent,
    run_archiver,
    run_domain_feed,
    run_gatekeeper,
    run_intake,
    run_pipeline,
    run_quota,
    run_read_api,
    run_registrar,
    run_router,
    run_scheduler,
    run_serving,
    run_store_watch,
    with_archive,
)

# What only fgpu up's own server needs (the auth callout's keys, its store's watch) and
# the agent's parts are imported where used: ``fgpu agent`` and ``fgpu api`` load neither
# (tests/cli/test_cli.py).
if TYPE_CHECKING:
    from services.actors.agent import AgentConfig
    from services.actors.store_watch import StoreWatch
    from services.adapters.nats_auth import ServerAuth
    from services.adapters.nats_server import NatsServer
    from services.api.serve import ReadApi
    from services.domain.log_space import Watermark
    from services.ports.proxy import Proxy

__all__ = [
    "ACTORS",
    "AgentPart",
    "ApiPart",
    "OwnServer",
    "ServePart",
    "Stack",
    "StackConfig",
    "Started",
    "StreamRefused",
]

# The cluster's actors a stack that owns its server runs, each as a service of this kind,
# and the read API's service (its keypair is kept even where the API does not run).
ACTORS = (
    "intake",
    "quota",
    "scheduler",
    "registrar",
    "serving",
    "api",
    "archiver",
    "domain-feed",
    "pipeline",
)

KeyStore = Callable[[EventLog, list[str]], Awaitable[Mapping[str, Identity]]]


class StreamRefused(Exception):
    """The stream could not be made, or its retention not updated: permanent for this
    start (the server's reason is the message)."""


@dataclass(frozen=True)
class OwnServer:
    """The server this process started, which the stack administers: it makes the stream
    (with ``retention``), gives a new cluster its superadmin (handed to ``first_admin``,
    whose secret is nowhere else), keypairs to its services (kept by ``service_keys``),
    runs the gatekeeper, and watches the room on the store's disk under ``watermark``;
    says ``secrets_key``'s public half on the log."""

    server: NatsServer
    auth: ServerAuth
    service_keys: KeyStore
    watermark: Watermark
    retention: Retention | None = None
    first_admin: Callable[[FirstAdmin], None] = lambda _: None
    # The cluster's secrets key: its public half said on the log at each start (if the log
    # says another), so people seal their secrets to it.
    secrets_key: SecretOpener | None = None


@dataclass(frozen=True)
class AgentPart:
    """An agent of ``config``, its containers on ``runtime()`` (entered first), slices
    enforced through ``regions``, ended sessions' output kept under ``output_root``, the
    MPS daemons of its GPUs with MPS run by ``mps`` (``config.mps_pipes``)."""

    config: AgentConfig
    runtime: Callable[[], AbstractAsyncContextManager[ContainerRuntime]]
    regions: SliceRegions | None = None
    output_root: Path | None = None
    mps: MpsControl | None = None
    secrets: SecretOpener | None = None  # opens the secrets its sessions refer to

    @property
    def kind(self) -> str:
        """Its service's kind (``agent:<id>``)."""
        return f"agent:{self.config.agent_id}"


@dataclass(frozen=True)
class ServePart:
    """A router, the service ``router:<router_id>``, keeping the proxy of ``proxy()`` at
    the log's route table (``services.actors.router_service``). The proxy is entered
    before any part starts and left after every part stopped."""

    proxy: Callable[[], AbstractAsyncContextManager[Proxy]]
    router_id: str = "local"

    @property
    def kind(self) -> str:
        """Its service's kind (``router:<id>``)."""
        return f"router:{self.router_id}"


@dataclass(frozen=True)
class ApiPart:
    """The projector and the read API, projecting into ``db``, listening on
    ``host:port``; the virtual folders' storage service under ``vfolder_root`` (if
    given), kept as ``vfolder_owner``; the web UI's apps origin on ``host:apps_port`` (0:
    a free port; None: none)."""

    db: Path
    host: str = "127.0.0.1"
    port: int = 0
    vfolder_root: str | None = None
    vfolder_owner: tuple[int, int] | None = None
    apps_port: int | None = 0


@dataclass(frozen=True)
class StackConfig:
    """What runs, where. With ``own``, the whole cluster (every actor of ``ACTORS``, and
    ``agent``, required) on the server this process started; without, only ``agent``
    and ``api``, each as its identity in ``identities`` (by kind: ``api``,
    ``agent:<id>``). ``serve``: a router and its proxy, with either. ``archive_dir``:
    where the log's archive is; the actors' and the API's reads cover it (None: they read
    the stream alone)."""

    url: str
    archive_dir: Path | None = None
    own: OwnServer | None = None
    identities: Mapping[str, Identity] = field(default_factory=dict)
    agent: AgentPart | None = None
    api: ApiPart | None = None
    serve: ServePart | None = None
    lost_grace_s: float = 600.0
    snapshot_events: int = 50_000
    archive_every_s: float = 60.0

    def kinds(self) -> list[str]:
        """The services it connects as, in the order it connects."""
        if self.own is not None:
            if self.agent is None:
                raise ValueError("a stack that owns its server runs an agent")
            return [*ACTORS, self.agent.kind, *self._router()]
        return [
            *(["api"] if self.api else []),
            *([self.agent.kind] if self.agent else []),
            *self._router(),
        ]

    def _router(self) -> list[str]:
        return [self.serve.kind] if self.serve is not None else []


@dataclass(frozen=True)
class Started:
    """What a started stack serves: its read API (None: none runs), the watch of its
    store's disk (None: its server is another's), and the proxy its router keeps (None:
    none runs)."""

    api: ReadApi | None = None
    watch: StoreWatch | None = None
    proxy: Proxy | None = None


class Stack:
    """The stack of ``config``, running for the block of ``running()``."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Started]:
        """Every part started, in the module's order, for the block; stopped in the
        reverse order when the block is left, however it is left. Leave it by returning
        (a signal sets an event the block waits for), not by cancelling a scope around
        it: what closes after the parts (the container runtime's client, the
        connections) must not run cancelled (aiodocker's close, cancelled there, loops
        for ever in contextlib on an exception whose context holds itself). Raises
        StreamRefused (a stack that owns its server), the runtime's error if its engine
        does not answer, MpsUnavailable if an MPS daemon does not start, and what a part
        raises (HelperFailed: the folders' helper; an OSError: the API's port). Entered
        and left in one task, as a task group is."""
        async with AsyncExitStack() as exits:
            yield await self._start(exits)

    async def _start(self, exits: AsyncExitStack) -> Started:
        c = self.config
        runtime = None
        if c.agent is not None:
            runtime = await exits.enter_async_context(c.agent.runtime())
            if c.agent.mps is not None:
                await anyio.to_thread.run_sync(c.agent.mps.start)
                exits.push_async_callback(_stop_mps, c.agent.mps)
        proxy = None
        if c.serve is not None:
            proxy = await exits.enter_async_context(c.serve.proxy())
        identities = await self._identities(exits)
        outer = await exits.enter_async_context(anyio.create_task_group())
        exits.callback(outer.cancel_scope.cancel)  # the block left: its parts stop
        if c.own is not None:
            server, auth = c.own.server, c.own.auth
            await outer.start(run_gatekeeper, c.url, auth, server.log_path)
        conns = await self._connect(exits, identities)
        tg = await exits.enter_async_context(anyio.create_task_group())
        exits.callback(tg.cancel_scope.cancel)
        watch = None
        if c.own is not None:
            # The room on the store's disk, and the server started again once it can
            # write again (the archiver's key: the log's keeper).
            watch = await tg.start(
                run_store_watch, conns["archiver"], c.own.server, c.own.watermark
            )
        # The actors' reads cover the archive too: one that has no snapshot to start
        # from replays the whole history here.
        logs: dict[str, EventLog] = {k: v.log for k, v in conns.items()}
        if c.archive_dir is not None:
            logs = {k: await with_archive(v.log, c.archive_dir) for k, v in conns.items()}
        if c.own is not None:
            await self._actors(tg, conns, logs)
        if c.agent is not None and runtime is not None:
            agent = partial(run_agent, output_root=c.agent.output_root, secrets=c.agent.secrets)
            await tg.start(agent, conns[c.agent.kind], runtime, c.agent.config, c.agent.regions)
        if c.serve is not None and proxy is not None:
            kind = c.serve.kind
            router = partial(run_router, snapshots=conns[kind].snapshots("scheduler"))
            await tg.start(router, logs[kind], proxy, c.serve.router_id)
        api = None
        if c.api is not None:
            api = await tg.start(self._api(c.api, c.url, watch, conns.get("archiver")), logs["api"])
        return Started(api, watch, proxy)

    async def _identities(self, exits: AsyncExitStack) -> Mapping[str, Identity]:
        """Each service's identity: on a server of its own, after its administration (the
        stream, a new cluster's superadmin, the services' keypairs); else as given."""
        own = self.config.own
        if own is None:
            return self.config.identities
        from services.adapters.nats_auth import SETUP_USER

        setup_user = Identity(SETUP_USER, own.auth.setup_password)
        setup = await exits.enter_async_context(
            connected(self.config.url, "fgpu-up-setup", setup_user)
        )
        try:
            await setup.log.create_or_update_stream(retention=own.retention)
        except LogError as e:
            raise StreamRefused(str(e)) from e
        first = await bootstrap(setup.log, SystemClock())
        if first is not None:
            own.first_admin(first)
        if own.secrets_key is not None:
            await publish_secrets_key(setup.log, SystemClock(), own.secrets_key.public_key)
        return await own.service_keys(setup.log, self.config.kinds())

    async def _connect(
        self, exits: AsyncExitStack, identities: Mapping[str, Identity]
    ) -> dict[str, NatsConnection]:
        """One connection per service, as its identity, for the stack's life."""
        url = self.config.url
        return {
            kind: await exits.enter_async_context(
                connected(url, f"fgpu-{kind.replace(':', '-')}", identities[kind])
            )
            for kind in self.config.kinds()
        }

    async def _actors(
        self,
        tg: TaskGroup,
        conns: Mapping[str, NatsConnection],
        logs: Mapping[str, EventLog],
    ) -> None:
        """The cluster's actors, each on its service's connection, each started in turn."""
        c = self.config
        await tg.start(run_intake, conns["intake"])
        await tg.start(run_domain_feed, conns["domain-feed"])
        registrar = partial(run_registrar, snapshots=conns["registrar"].snapshots("scheduler"))
        await tg.start(registrar, logs["registrar"])
        serving = partial(run_serving, snapshots=conns["serving"].snapshots("scheduler"))
        await tg.start(serving, logs["serving"])
        quota = partial(
            run_quota,
            snapshots=conns["quota"].snapshots("quota"),
            snapshot_events=c.snapshot_events,
        )
        await tg.start(quota, logs["quota"])
        schedule = partial(
            run_scheduler,
            lost_grace_s=c.lost_grace_s,
            snapshots=conns["scheduler"].snapshots("scheduler"),
            snapshot_events=c.snapshot_events,
        )
        await tg.start(schedule, logs["scheduler"], conns["scheduler"].bus)
        pipeline = partial(
            run_pipeline,
            snapshots=conns["pipeline"].snapshots("pipeline"),
            snapshot_events=c.snapshot_events,
        )
        await tg.start(pipeline, logs["pipeline"])
        if c.archive_dir is not None:
            archiver = partial(run_archiver, conns["archiver"], c.archive_dir, c.archive_every_s)
            await tg.start(archiver)

    @staticmethod
    def _api(
        part: ApiPart, url: str, watch: StoreWatch | None, snapshots: NatsConnection | None
    ) -> Callable[..., Coroutine[Any, Any, None]]:
        """The read API's runner: the log's health as ``watch`` finds it, the actors'
        snapshots read through ``snapshots`` (the archiver's connection), where given; the
        web UI's writes on the bus at ``url``, each as its user."""
        return partial(
            run_read_api,
            db=part.db,
            host=part.host,
            port=part.port,
            vfolder_root=part.vfolder_root,
            vfolder_owner=part.vfolder_owner,
            apps_port=part.apps_port,
            watch=watch,
            snapshots=snapshots,
            url=url,
        )


async def _stop_mps(mps: MpsControl) -> None:
    """``mps`` stopped (in a thread: it waits for the daemons), even as the stack is
    cancelled."""
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(mps.stop)
