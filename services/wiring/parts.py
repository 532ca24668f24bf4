"""Each part of the stack on its real adapters, run as a task that says when it is ready
(``task_status``): what ``Stack`` assembles, and what the commands that run one part
(``fgpu agent``, ``fgpu scheduler``, ...) and the tests run on their own."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from anyio.abc import TaskStatus

from events import subjects as subj
from services.actors.liveness import send_heartbeats, watch_heartbeats
from services.actors.quota import QuotaActor
from services.actors.registrar import RegistrarActor
from services.actors.scheduler import SchedulerActor
from services.actors.serving import ServingActor
from services.actors.snapshots import Snapshots, survey
from services.adapters.nats_connection import NatsConnection, nats_connection
from services.adapters.system_clock import SystemClock
from services.domain.fold.cluster import ClusterState
from services.domain.intake import DEFAULT_BURST, DEFAULT_RATE, DEFAULT_WINDOW_S
from services.ports import (
    ContainerRuntime,
    EventLog,
    Heartbeats,
    SecretOpener,
    SliceRegions,
    SnapshotStore,
)
from services.wiring.identity import Identity

if TYPE_CHECKING:
    from services.actors.access_audit import AccessAudit
    from services.actors.agent import AgentConfig
    from services.actors.gatekeeper import GatekeeperActor
    from services.actors.store_watch import StoreWatch
    from services.adapters.jetstream import JetStreamLog
    from services.adapters.nats_auth import ServerAuth
    from services.adapters.nats_server import NatsServer
    from services.adapters.nats_server_log import Violation
    from services.api.serve import ReadApi
    from services.domain.log_space import Watermark
    from services.ports.proxy import Proxy

__all__ = [
    "connected",
    "run_agent",
    "run_agent_host",
    "run_archiver",
    "run_domain_feed",
    "run_gatekeeper",
    "run_intake",
    "run_pipeline",
    "run_quota",
    "run_read_api",
    "run_registrar",
    "run_router",
    "run_scheduler",
    "run_serving",
    "run_store_watch",
    "violations_to",
    "with_archive",
]

log = structlog.get_logger()


@asynccontextmanager
async def connected(
    url: str, name: str, identity: Identity | None = None
) -> AsyncIterator[NatsConnection]:
    """The log and the bus of one connection to ``url`` as ``identity`` (None: anonymous),
    for the block."""
    options = identity.options() if identity is not None else {}
    async with nats_connection(url, name=name, **options) as conn:
        yield conn


async def run_quota(
    events: EventLog,
    *,
    durable: str = "quota",
    snapshots: SnapshotStore | None = None,
    snapshot_events: int = 50_000,
    task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Quota, starting from (and keeping, every ``snapshot_events``) the quota's
    snapshots in ``snapshots``."""
    kept = (
        Snapshots(snapshots, writes=True, every_events=snapshot_events)
        if snapshots is not None
        else None
    )
    await QuotaActor(events, SystemClock(), durable=durable, snapshots=kept).run(
        task_status=task_status
    )


async def run_gatekeeper(
    url: str,
    auth: ServerAuth,
    server_log: str | None = None,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The gatekeeper: it reads the tenancy as the static user fgpu-gate, answers the
    server's authorization requests, keeps reader keypairs' consumers, and disconnects
    revoked keys as the system user.
    Connections let in and refused go to the access audit, and so do the permission
    violations the server writes to ``server_log`` (when it runs beside the server)."""
    from services.actors.access_audit import AccessAudit
    from services.actors.gatekeeper import GatekeeperActor
    from services.actors.reader_consumers import ReaderConsumersActor
    from services.adapters.jetstream_domains import JetStreamReaderConsumers
    from services.adapters.nats_auth import GATE_USER
    from services.adapters.nats_callout import SystemKicker, serve_callout
    from services.adapters.nats_server_log import follow_violations

    gate = Identity(GATE_USER, auth.gate_password)
    async with connected(url, "fgpu-gatekeeper", gate) as conn:
        kicker = await SystemKicker.connect(url, auth)
        try:
            audit = AccessAudit(conn.log, SystemClock(), "nats", "gatekeeper")
            keeper = GatekeeperActor(conn.log, kicker, SystemClock(), audit=audit)
            readers = ReaderConsumersActor(conn.log, JetStreamReaderConsumers(conn.client))
            async with anyio.create_task_group() as tg:
                await tg.start(audit.run)
                await tg.start(keeper.run)
                await tg.start(readers.run)
                await tg.start(serve_callout, url, auth, keeper.authorize)
                if server_log is not None:
                    tg.start_soon(follow_violations, server_log, violations_to(audit, keeper))
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True):
                await kicker.close()


def violations_to(
    audit: AccessAudit, keeper: GatekeeperActor
) -> Callable[[Violation], Awaitable[None]]:
    """What tells the access audit of a permission violation the server logged."""

    async def told(v: Violation) -> None:
        reason = f"permissions violation ({v.identity})"
        audit.refused(keeper.key_of(v.identity), f"{v.kind} {v.subject}", reason, v.client)

    return told


async def run_domain_feed(
    conn: NatsConnection, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """The domain feed on ``conn`` (its service keypair's): each domain's records of the
    log, for the domain's readers."""
    from services.actors.domain_feed import DomainFeedActor
    from services.adapters.jetstream_domains import JetStreamDomainFeed

    feed = DomainFeedActor(conn.log, JetStreamDomainFeed(conn.client))
    await feed.run(task_status=task_status)


async def run_intake(
    conn: NatsConnection,
    *,
    rate: float = DEFAULT_RATE,
    burst: int = DEFAULT_BURST,
    window_s: float = DEFAULT_WINDOW_S,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The intake on ``conn`` (its service keypair's): people's requests onto the log, each
    key at ``rate`` a second (``burst`` at once), its drops said once per ``window_s``."""
    from services.actors.intake import IntakeActor
    from services.adapters.jetstream_intake import JetStreamIntake
    from services.domain.intake import Drops, KeyRates

    actor = IntakeActor(
        JetStreamIntake(conn.client),
        conn.log,
        SystemClock(),
        rates=KeyRates(rate, burst),
        drops=Drops(window_s),
    )
    await actor.run(task_status=task_status)


async def run_pipeline(
    events: EventLog,
    *,
    snapshots: SnapshotStore | None = None,
    snapshot_events: int = 50_000,
    task_status: TaskStatus[object] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The pipeline actor (its durable: ``pipeline``), starting from (and keeping, every
    ``snapshot_events``) its snapshots in ``snapshots``."""
    from services.actors.pipeline import PipelineActor
    from services.actors.snapshots import PIPELINE, StateSnapshots

    kept = (
        StateSnapshots(snapshots, PIPELINE, writes=True, every_events=snapshot_events)
        if snapshots is not None
        else None
    )
    await PipelineActor(events, SystemClock(), snapshots=kept).run(task_status=task_status)


async def run_registrar(
    events: EventLog,
    *,
    snapshots: SnapshotStore | None = None,
    task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The registrar, starting from the scheduler's snapshots in ``snapshots``."""
    kept = Snapshots(snapshots, writes=False) if snapshots is not None else None
    await RegistrarActor(events, SystemClock(), snapshots=kept).run(task_status=task_status)


async def run_serving(
    events: EventLog,
    *,
    snapshots: SnapshotStore | None = None,
    task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The serving actor, starting from the scheduler's snapshots in ``snapshots``."""
    kept = Snapshots(snapshots, writes=False) if snapshots is not None else None
    await ServingActor(events, SystemClock(), snapshots=kept).run(task_status=task_status)


async def run_router(
    events: EventLog,
    proxy: Proxy,
    router_id: str,
    *,
    snapshots: SnapshotStore | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Router ``router_id`` keeping ``proxy`` at the log's route table, starting from the
    scheduler's snapshots in ``snapshots``."""
    from services.actors.router_service import RouterService

    kept = Snapshots(snapshots, writes=False) if snapshots is not None else None
    service = RouterService(events, SystemClock(), router_id, [proxy], snapshots=kept)
    await service.run(task_status=task_status)


async def run_scheduler(
    events: EventLog,
    heartbeats: Heartbeats,
    *,
    lost_after_s: float = 15.0,
    lost_grace_s: float = 600.0,
    durable: str = "scheduler",
    policy: str = "best-fit",
    snapshots: SnapshotStore | None = None,
    snapshot_events: int = 50_000,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The scheduler, placing with ``policy``, and the heartbeats it hears. ``durable``:
    its cursor on the log, one per scheduler (two sharing one would each see half the
    log). It starts from (and keeps) the scheduler's snapshots in ``snapshots``."""
    actor = SchedulerActor(
        events,
        SystemClock(),
        lost_after_s=lost_after_s,
        lost_grace_s=lost_grace_s,
        durable=durable,
        policy=policy,
        snapshots=(
            Snapshots(snapshots, writes=True, every_events=snapshot_events)
            if snapshots is not None
            else None
        ),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(watch_heartbeats, heartbeats, actor)
        await tg.start(actor.run)
        task_status.started()


async def run_agent(
    conn: NatsConnection,
    runtime: ContainerRuntime,
    config: AgentConfig,
    regions: SliceRegions | None = None,
    *,
    output_root: Path | None = None,
    secrets: SecretOpener | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The agent (opening its sessions' secrets with ``secrets``), its heartbeat, its
    answers to requests (``fgpu session logs|exec``) and the channels they open (``fgpu
    session shell|app``).
    Ended sessions' output is kept in ``output_root/<agent>`` (None: not kept). With real GPUs, the
    agent watches what their driver counts of its sessions' processes (NVML, and their
    cgroups under ``/proc``: the agent must see the host's pids)."""
    from services.actors.agent import AgentActor
    from services.actors.agent_channels import Channels
    from services.actors.agent_requests import answering
    from services.adapters.gpu_probe import NvmlProcessWatch
    from services.adapters.output_files import OutputFiles
    from services.adapters.proc_cgroups import CgroupContainers

    from_scheduler = Snapshots(conn.snapshots("scheduler"), writes=False)
    output = None if output_root is None else OutputFiles(output_root / config.agent_id)
    clock = SystemClock()
    channels = Channels(config.agent_id, runtime, conn.bus, conn.log, clock)
    real_gpus = bool(config.gpus) and not config.mock_gpus
    driver = NvmlProcessWatch() if real_gpus else None
    actor = AgentActor(
        conn.log,
        runtime,
        clock,
        config,
        regions,
        snapshots=from_scheduler,
        output=output,
        on_tenancy=channels.cut_refused,
        gpu_watch=driver,
        containers=CgroupContainers() if real_gpus else None,
        secrets=secrets,
    )
    answer = answering(
        config.agent_id,
        runtime,
        lambda: actor.state,
        conn.log,
        actor.clock,
        output=output,
        channels=channels,
    )
    async with anyio.create_task_group() as outer:
        # The channels outlive the answers that open them: their group is the outer one.
        await outer.start(channels.run)
        try:
            async with conn.bus.serving(config.agent_id, answer), anyio.create_task_group() as tg:
                await tg.start(actor.run)
                tg.start_soon(send_heartbeats, conn.bus, [config.agent_id])
                task_status.started()
        finally:
            if driver is not None:
                driver.close()


async def run_agent_host(
    conn: NatsConnection,
    configs: list[AgentConfig],
    runtime: Callable[[], ContainerRuntime],
    *,
    durable: str = "agent-host",
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Many simulated agents sharing one fold of the log, and their heartbeats; ``durable``:
    their cursor on the log, one per process."""
    from services.actors.agent import AgentActor
    from services.actors.agent_host import AgentHost

    clock = SystemClock()
    agents = [AgentActor(conn.log, runtime(), clock, c) for c in configs]
    from_scheduler = Snapshots(conn.snapshots("scheduler"), writes=False)
    host = AgentHost(conn.log, agents, durable=durable, snapshots=from_scheduler)
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        tg.start_soon(send_heartbeats, conn.bus, [c.agent_id for c in configs])
        task_status.started()


async def run_store_watch(
    conn: NatsConnection,
    server: NatsServer,
    watermark: Watermark,
    *,
    task_status: TaskStatus[StoreWatch] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The watcher beside ``server``, a server this process started: the room on its
    store's disk said on the log (as ``conn``'s keypair, the archiver's), the server
    started again once it can write again. Started with the watcher, once it has looked."""
    from services.actors.store_watch import StoreWatch
    from services.adapters.nats_supervisor import StoreDirDisk, SupervisedServer

    supervised = SupervisedServer(server)
    watch = StoreWatch(
        conn.log,
        StoreDirDisk(server.store_dir),
        supervised,
        SystemClock(),
        server_name="fgpu",  # as nats-base.conf names every fgpu server
        watermark=watermark,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(supervised.follow)
        await tg.start(watch.run)
        task_status.started(watch)


async def with_archive(events: JetStreamLog, root: Path) -> EventLog:
    """``events`` whose reads cover its archive under ``root`` too (projections.archive)."""
    from projections.archive import Archive, ArchivedLog  # DuckDB: only when served

    return ArchivedLog(events, Archive(root, await events.identity()))


async def run_archiver(
    conn: NatsConnection,
    root: Path,
    every_s: float = 60.0,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The archiver of a log made with retention (it does nothing on one that keeps
    everything), writing the archive under ``root``, a pass every ``every_s``."""
    from projections.archive import Archive
    from services.actors.archiver import Archiver

    archive = Archive(root, await conn.log.identity())
    stores = [conn.snapshots(kind) for kind in subj.SNAPSHOT_KINDS]
    archiver = Archiver(conn.log, conn.log, archive, stores, SystemClock())
    await archiver.run(every_s, task_status=task_status)


async def _survey(conn: NatsConnection) -> list[dict[str, Any]]:
    """Each kind of actor snapshot's health, read through ``conn``."""
    stores = {kind: conn.snapshots(kind) for kind in subj.SNAPSHOT_KINDS}
    return await survey(stores, conn.log)


async def run_read_api(
    events: EventLog,
    db: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    vfolder_root: str | None = None,
    vfolder_owner: tuple[int, int] | None = None,
    apps_port: int | None = None,
    watch: StoreWatch | None = None,
    snapshots: NatsConnection | None = None,
    url: str | None = None,
    task_status: TaskStatus[ReadApi] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The projector and the read API, its sign-ins and refusals audited on the log; the
    storage service of the virtual folders under ``vfolder_root``, if given, kept as
    ``vfolder_owner`` (uid, gid; None: ``storage_owner``'s choice); the log's health as
    ``watch`` (the watcher beside its server, in this process) finds it now, over what
    the log holds; each actor snapshot's health read through ``snapshots`` (a service's
    connection that may read them: the archiver's), for ``/v1/status``; the web UI's
    writes on the bus at ``url``, each on its user's own connection (None: it writes
    nothing), and its sessions' apps on ``host:apps_port`` (None: none). Raises
    HelperFailed if the folders' helper cannot start."""
    from services.actors.access_audit import AccessAudit
    from services.adapters.vfolder_files import FolderFiles
    from services.api.serve import serve_read_api  # heavy: only when serving
    from services.wiring.acting import acting_on

    audit = AccessAudit(events, SystemClock(), "api", "api")
    files = None
    if vfolder_root is not None:
        start = functools.partial(FolderFiles, vfolder_root, owner=vfolder_owner)
        files = await anyio.to_thread.run_sync(start)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(audit.run)
            live = None if watch is None else (lambda: watch.current)
            survey = None if snapshots is None else functools.partial(_survey, snapshots)
            serve = functools.partial(
                serve_read_api,
                recorder=audit,
                vfolders=files,
                live_health=live,
                snapshots=survey,
                act=None if url is None else acting_on(url),
                apps_port=apps_port,
            )
            api = await tg.start(serve, events, db, host, port)
            task_status.started(api)
    finally:
        if files is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(files.close)
