"""The agent actor: runs the sessions placed on its node and reports what becomes of them.

Each session placed here gets one supervising task that owns its container from start
to end and is the only writer of its reports (``fgpu.agent.<id>.s.<session>``, each
append expecting the subject's last sequence). The supervisor looks at the container
before acting, so the same code starts a new session and re-adopts one after a restart:

    status on the log   container found        what the supervisor does
    SCHEDULED/PREPARING none                   report PREPARING, run, report RUNNING
    SCHEDULED/PREPARING running                report RUNNING (it started before a crash)
    PULLING             none                   pull (again), run, report RUNNING
    SCHEDULED..PULLING  created, never started start it, report RUNNING
    RUNNING             running                keep watching (re-adopted)
    any                 exited                 remove it, report TERMINATED with its code
    RUNNING/TERMINATING none                   report TERMINATED: vanished while we were down
    TERMINATING         running                stop it, report TERMINATED

An image the engine lacks is pulled when the agent has a registry (``--registry``) and the
image's reference names it: the session goes PULLING with its progress (throttled,
``services.domain.pull_progress``), then RUNNING; the agent then reports the images it
holds (``agent.images-reported``). Any other missing image ends the session in ERROR.

Running sessions therefore survive a restart of every actor: containers keep running,
and the new agent process picks them up by their labels. What the agent measures of its
sessions (GPU usage, out-of-memory refusals, CPU time) is ``agent_usage.UsageMeter``'s;
what the GPU driver itself counts of their processes, ``agent_watch.GpuWatch``'s: it stops
a session that holds more than its slice.

A container is labelled with the identity of the log its session is on (``fgpu.log``).
An agent started on another log (a new store, a stream made anew and empty) finds
containers of a log that is not its own: it cannot account for them, so it never touches
them, and says so at every start, loudly, until someone removes them or points the agent
back at their log.
"""

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from events import (
    AgentFenced,
    AgentImagesReported,
    AgentRegistered,
    AnyEvent,
    SessionErrored,
    SessionPreparing,
    SessionPulling,
    SessionRunning,
    SessionTerminated,
    SessionType,
    Slots,
)
from events import subjects as subj
from services.actors.agent_config import AgentConfig
from services.actors.agent_pacing import SharePacer
from services.actors.agent_usage import UsageMeter
from services.actors.agent_watch import GpuWatch
from services.actors.common import Provenance, follow_log, stamp
from services.actors.snapshots import Snapshots
from services.actors.vfolder_dirs import make_folder_dir
from services.domain.container_spec import (
    LABEL_AGENT,
    LABEL_LOG,
    LABEL_SESSION,
    ContainerSpec,
    Mount,
    session_spec,
    with_secrets,
)
from services.domain.fold.cluster import ClusterState
from services.domain.gpu_slice import DeviceSlice, slices
from services.domain.mps import MpsClient, mps_client, shim_slice
from services.domain.pull_progress import PullThrottle
from services.domain.records import SessionView
from services.domain.scheduling.images import pulls_from
from services.domain.status import HOLDS_ALLOCATION, SessionStatus
from services.domain.tenancy.vfolders import folder_dir, mount_plan
from services.ports import (
    Clock,
    ContainerError,
    ContainerInfo,
    ContainerRuntime,
    EventLog,
    GpuProcessWatch,
    ImageNotFound,
    KeptOutput,
    LogError,
    OutputStore,
    ProcessContainers,
    RuntimeUnavailable,
    SecretOpener,
    SecretUnreadable,
    SliceRegions,
)

__all__ = ["KEPT_OUTPUT_LINES", "AgentActor", "AgentConfig"]

S = SessionStatus
log = structlog.get_logger()
KEPT_OUTPUT_LINES = 10_000  # of an ended session's output, for `fgpu session logs`
_STARTING = frozenset({S.SCHEDULED, S.PREPARING, S.PULLING})  # placed here, not yet RUNNING


@dataclass
class _Supervised:
    container_id: str | None = None
    stop_requested: bool = False
    stopping: bool = False
    # Its image's pull, while one runs: a stop order cancels it (a destroy must not wait
    # for gigabytes to arrive before the session ends).
    pulling: anyio.CancelScope | None = None
    # Its last report is appended but perhaps not folded yet: kept until the session
    # holds nothing here, so an older report folded late cannot start a second one.
    done: bool = False
    # Why the agent stopped it of its own accord (its end report says so); None: it did not.
    stop_reason: str | None = None


def _ended_view(session_id: str) -> SessionView:
    return SessionView(
        session_id=session_id,
        owner="",
        image="",
        command=(),
        slots=Slots(),
        priority=0,
        name=None,
        request_id="",
        correlation_id="",
        arrival_seq=0,
        requested_at=datetime(1970, 1, 1, tzinfo=UTC),
        status=S.TERMINATED,
    )


@dataclass
class _Local:
    supervised: dict[str, _Supervised] = field(default_factory=dict)
    found: dict[str, ContainerInfo] = field(default_factory=dict)  # at start-up, by session


class AgentActor:
    def __init__(
        self,
        events: EventLog,
        runtime: ContainerRuntime,
        clock: Clock,
        config: AgentConfig,
        regions: SliceRegions | None = None,
        *,
        snapshots: Snapshots | None = None,
        output: OutputStore | None = None,
        on_tenancy: Callable[[ClusterState], Awaitable[None]] | None = None,
        gpu_watch: GpuProcessWatch | None = None,
        containers: ProcessContainers | None = None,
        secrets: SecretOpener | None = None,
    ) -> None:
        """``gpu_watch`` and ``containers`` (both, or neither): the driver's figures of the
        host's processes and their containers, with which the agent holds each session to
        its slice whatever happens inside (``agent_watch.GpuWatch``). ``secrets``: the
        cluster's secrets key, which opens the secrets sessions refer to (None: a session
        that refers to one ends in ERROR here)."""
        if not subj.is_token(config.agent_id):
            raise ValueError(f"agent id {config.agent_id!r} must be letters, digits, - or _")
        self.events = events
        self.runtime = runtime
        self.clock = clock
        self.config = config
        self.regions = regions
        self.secrets = secrets
        self.snapshots = snapshots  # where it starts from (the scheduler's: read only)
        self.output = output  # where an ended session's last output lines are kept
        # Told the fold once rebuilt and whenever its tenancy changed (a key revoked: its
        # open channels are cut).
        self.on_tenancy = on_tenancy
        self.name = f"agent:{config.agent_id}"
        self.local = _Local()
        self.log_identity: str | None = None  # the log's (EventLog.identity), once read
        self.state = ClusterState()
        self._tg: TaskGroup | None = None
        self._reannounced = False
        self.meter = UsageMeter(
            events, runtime, clock, config, regions, state=lambda: self.state, running=self._running
        )
        self.pacer: SharePacer | None = None
        if gpu_watch is not None and regions is not None:
            self.pacer = SharePacer(
                config, regions, gpu_watch, state=lambda: self.state, running=self._running
            )
        self.watch: GpuWatch | None = None
        if gpu_watch is not None and containers is not None:
            self.watch = GpuWatch(
                config,
                gpu_watch,
                containers,
                state=lambda: self.state,
                running=self._running,
                stop=self.stop_for,
                publish=self.meter.publish_measured,
            )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self.attach(tg)
            await tg.start(self._follow)
            if self.regions is not None:
                tg.start_soon(self.meter.meter, self.regions)
            tg.start_soon(self.meter.sample_cpu)
            if self.watch is not None:
                tg.start_soon(self.watch.run)
            if self.pacer is not None:
                tg.start_soon(self.pacer.run)
            task_status.started()

    def attach(self, tg: TaskGroup) -> None:
        """The task group the session supervisors run in (set by ``run`` or a host)."""
        self._tg = tg

    async def _follow(self, *, task_status: TaskStatus[ClusterState]) -> None:
        await follow_log(
            self.events,
            f"agent-{self.config.agent_id}",
            self.react,
            task_status=task_status,
            on_rebuild=self.on_rebuild,
            snapshots=self.snapshots,
        )

    async def on_rebuild(self, s: ClusterState) -> None:
        """Take stock of our containers (those of this log) and announce our capacity."""
        self.state = s
        if self.on_tenancy is not None:
            await self.on_tenancy(s)
        self.log_identity = await self.events.identity()
        found = await self.runtime.list({LABEL_AGENT: self.config.agent_id})
        ours = self._of_this_log(found)
        foreign = [c for c in found if c not in ours]
        if foreign:
            log.error(
                "agent.containers_of_another_log",
                agent=self.config.agent_id,
                log=self.log_identity,
                containers={c.id[:12]: c.labels.get(LABEL_LOG) for c in foreign},
                action="kept, untouched: this agent cannot account for them",
            )
        self.local.found = {c.labels[LABEL_SESSION]: c for c in ours if LABEL_SESSION in c.labels}
        await self.register()

    def _running(self) -> dict[str, str]:
        """The sessions supervised here that have a container: its id, by session."""
        return {
            session_id: sup.container_id
            for session_id, sup in self.local.supervised.items()
            if sup.container_id is not None and not sup.done
        }

    def _of_this_log(self, containers: list[ContainerInfo]) -> list[ContainerInfo]:
        """Those of ``containers`` this agent may act on: of this log (or labelled with
        none: made before containers were)."""
        me = self.log_identity
        return [c for c in containers if c.labels.get(LABEL_LOG, me) == me]

    async def register(self) -> None:
        c = self.config
        details = tuple(await self.runtime.image_details())
        e = stamp(
            AgentRegistered,
            Provenance(self.name, self.clock.now()),
            agent_id=c.agent_id,
            capacity=Slots(
                cpu=c.capacity.cpu, mem=c.capacity.mem, fgpu=len(c.gpus) * c.fgpu_per_gpu
            ),
            gpus=c.gpus,
            fgpu_per_gpu=c.fgpu_per_gpu,
            images=tuple(sorted(i.ref for i in details)),
            runtime=c.runtime_name,
            group=c.group,
            image_details=details,
            registry=c.registry,
            storage_hosts=() if c.vfolder_root is None else c.storage_hosts,
        )
        await self.events.append(subj.agent(c.agent_id), e)

    async def react(self, s: ClusterState) -> None:
        """React to what the last batch changed (everything, after a rebuild)."""
        if s.tenancy_changed and self.on_tenancy is not None:
            await self.on_tenancy(s)
        me = s.agents.get(self.config.agent_id)
        if me is None:
            return
        supervised = self.local.supervised
        ids = [i for i in s.changed if i in me.sessions or i in supervised]
        await self.react_to(s, ids, agent_changed=self.config.agent_id in s.changed_agents)

    async def react_to(
        self, s: ClusterState, session_ids: list[str], *, agent_changed: bool
    ) -> None:
        """React to changes of these sessions of ours (and of our registration)."""
        self.state = s
        me = s.agents.get(self.config.agent_id)
        assert self._tg is not None
        if me is None:
            return
        if agent_changed:
            if me.lost and not self._reannounced:
                # Declared lost (say, heartbeats held up): alive after all, say so again.
                self._reannounced = True
                await self.register()
            elif not me.lost:
                self._reannounced = False
        for session_id in session_ids:
            if session_id not in me.sessions:
                # It ended, or the scheduler took it back (this agent was declared lost):
                # whatever its supervisor started is stopped, or it would run twice.
                gone = self.local.supervised.pop(session_id, None)
                if gone is not None and not gone.done and not gone.stop_requested:
                    gone.stop_requested = True
                    self._tg.start_soon(self._stop, session_id, gone)
                continue
            v = s.sessions[session_id]
            sup = self.local.supervised.get(session_id)
            if sup is not None and sup.done:
                continue
            if sup is None:
                sup = self.local.supervised[session_id] = _Supervised()
                self._tg.start_soon(self._supervise, session_id, sup)
            elif v.status is S.TERMINATING and not sup.stop_requested:
                sup.stop_requested = True
                self._tg.start_soon(self._stop, session_id, sup)
        if self.local.found:
            await self._remove_orphans(s)

    async def _remove_orphans(self, s: ClusterState) -> None:
        """Containers of ours whose session holds nothing here: ended while we were down
        (the scheduler gave up on us, or they were destroyed). Stopped and removed, and
        said (``agent.fenced``): nothing of theirs runs on."""
        fenced: list[str] = []
        for session_id, c in list(self.local.found.items()):
            v = s.sessions.get(session_id)
            if v is None or v.agent_id != self.config.agent_id or v.status not in HOLDS_ALLOCATION:
                del self.local.found[session_id]
                await self.runtime.remove(c.id, stop_timeout_s=self.config.stop_timeout_s)
                fenced.append(session_id)
        if fenced:
            log.warning("agent.fenced", agent=self.config.agent_id, sessions=fenced)
            e = stamp(
                AgentFenced,
                Provenance(self.name, self.clock.now()),
                agent_id=self.config.agent_id,
                session_ids=tuple(fenced),
            )
            with contextlib.suppress(LogError):  # the removal is what matters; it is logged
                await self.events.append(subj.agent(self.config.agent_id), e)

    def stop_for(self, session_id: str, reason: str) -> None:
        """Stop a running session of ours at once, of the agent's own accord: its container
        is killed without grace and the session ends TERMINATED with ``reason``. Nothing
        happens to a session not running here, or already being stopped."""
        sup = self.local.supervised.get(session_id)
        if sup is None or sup.done or sup.stop_requested or sup.container_id is None:
            return
        assert self._tg is not None
        sup.stop_requested = True
        sup.stop_reason = reason
        self._tg.start_soon(self._stop, session_id, sup)

    async def _stop(self, session_id: str, sup: _Supervised) -> None:
        if sup.pulling is not None:
            sup.pulling.cancel()  # its supervisor then ends it, never started
        if sup.container_id is not None and not sup.stopping:
            sup.stopping = True
            await self._keep_output(session_id, sup.container_id)
            # Stopped for cause: no grace for a process that would ignore SIGTERM.
            grace = 0.0 if sup.stop_reason is not None else self.config.stop_timeout_s
            await self.runtime.remove(sup.container_id, stop_timeout_s=grace)

    # ---- one session ----------------------------------------------------------------------

    async def _supervise(self, session_id: str, sup: _Supervised) -> None:
        """Run the session's lifecycle until its end is on the log, whatever fails meanwhile.

        A log or engine that is away is waited for (capped backoff), never given up on: a
        supervisor that stopped would leave the session holding its share for ever. A
        supervisor cancelled because the agent shuts down stays registered (no `finally`),
        or a last reaction of the dying agent would start another one; the session's region
        stays too, as the container runs on and the next agent re-adopts it.
        """
        attempt = 0
        failed: ContainerError | None = None
        while True:
            v = self.state.sessions.get(session_id)
            if v is None or v.status not in HOLDS_ALLOCATION or v.agent_id != self.config.agent_id:
                # Its end is on the log: a report that seemed to fail had landed. Going on
                # would run its command a second time, or report its end again.
                break
            try:
                if failed is None:
                    await self._lifecycle(session_id, sup)
                else:
                    reason = f"container engine: {failed}"
                    await self._end(session_id, SessionErrored, reason=reason)
                break
            except RuntimeUnavailable as e:
                log.warning("agent.engine_unavailable", session=session_id, error=str(e))
            except ContainerError as e:
                failed = e  # permanent for this session: report it (and retry the report)
                continue
            except LogError as e:
                # Our view of the session is stale or the log is away: look again.
                log.warning("agent.report_failed", session=session_id, error=str(e))
            await anyio.sleep(min(0.2 * 2**attempt, 5.0))
            attempt += 1
            with contextlib.suppress(ContainerError):
                found = self._of_this_log(await self.runtime.list({LABEL_SESSION: session_id}))
                if found:
                    self.local.found[session_id] = found[0]
        sup.done = True

    def _session(self, session_id: str) -> SessionView:
        """The session as the fold holds it; one the fold let go of (it ended, as the log
        says, while its supervisor was busy) as an ended view of its id, so that the
        supervisor stops what it started and finds its end on the log."""
        v = self.state.sessions.get(session_id)
        return _ended_view(session_id) if v is None else v

    async def _lifecycle(self, session_id: str, sup: _Supervised) -> None:
        v = self._session(session_id)
        c = self.local.found.pop(session_id, None)
        if c is None and v.status in (S.RUNNING, S.TERMINATING):
            # Ask the engine, not a list taken earlier: only a container it does not have
            # may be reported as vanished.
            listed = self._of_this_log(await self.runtime.list({LABEL_SESSION: session_id}))
            c = listed[0] if listed else None
        never_started = c is not None and not c.running and c.exit_code is None
        if never_started and v.status in _STARTING and not sup.stop_requested:
            # Created and never started (the agent stopped between the engine's create and
            # start): waiting on it would answer at once, exit 0, as if its command had
            # run. ``run`` starts it.
            c = None
        if c is None:
            if v.status in (S.RUNNING, S.TERMINATING) and v.container_id is not None:
                await self._end(
                    session_id,
                    SessionTerminated,
                    exit_code=None,
                    reason="the container vanished while the agent was down",
                )
                return
            if v.status is S.TERMINATING or sup.stop_requested:
                await self._end(
                    session_id,
                    SessionTerminated,
                    exit_code=None,
                    reason="stopped before it started",
                )
                return
            c = await self._start(session_id, v, sup)
            if c is None:
                return
        sup.container_id = c.id
        v = self._session(session_id)
        if c.running and v.status in _STARTING:
            host = c.host if v.session_type is SessionType.INFERENCE else None
            await self._report(session_id, SessionRunning, container_id=c.id, host=host)
        if sup.stop_requested or self._session(session_id).status is S.TERMINATING:
            sup.stop_requested = True
            await self._stop(session_id, sup)
        code: int | None
        try:
            code = await self.runtime.wait(c.id)
        except ContainerError as e:
            # A stop order removes the container; one carried out before the wait began
            # leaves no exit code to read. The session still ended as asked, not in error.
            if isinstance(e, RuntimeUnavailable) or not sup.stopping:
                raise
            code = None
        if not sup.stopping:  # a stop order kept it before removing the container
            await self._keep_output(session_id, c.id)
        await self.runtime.remove(c.id, stop_timeout_s=self.config.stop_timeout_s)
        if self.regions is not None:
            self.regions.reclaim(session_id)  # its processes are all gone now
        try:
            await self.meter.publish_usage(session_id)
        except LogError as e:  # best effort: the exit must be reported whatever happens here
            log.warning("agent.usage_not_published", session=session_id, error=str(e))
        reason = sup.stop_reason or ("stopped on request" if sup.stop_requested else "exited")
        await self._end(session_id, SessionTerminated, exit_code=code, reason=reason)

    async def _start(
        self, session_id: str, v: SessionView, sup: _Supervised
    ) -> ContainerInfo | None:
        """Prepare session ``v``'s container (its folders, secrets, slice and region) and
        run it. None: the session was ended here instead (the reason on the log)."""
        if v.status is S.SCHEDULED:
            await self._report(session_id, SessionPreparing)
        folders = await self._vfolders(v)
        opened = self._opened_secrets(v)
        if isinstance(folders, str) or isinstance(opened, str):
            reason = folders if isinstance(folders, str) else opened
            await self._end(session_id, SessionErrored, reason=str(reason))
            return None
        parts = self._slice(v)
        mps = mps_client(parts, dict(self.config.mps_pipes))
        # One slice, as the shim enforces it, for the region and the environment alike.
        parts = shim_slice(parts, mps)
        spec = self._spec(v, parts, self._create_region(v, parts), folders, mps)
        spec = with_secrets(spec, opened)
        try:
            c = await self._run_pulling(session_id, spec, sup)
        except ImageNotFound as e:
            await self._end(session_id, SessionErrored, reason=str(e))
            return None
        if c is None:
            reason = "stopped while its image was being pulled"
            await self._end(session_id, SessionTerminated, exit_code=None, reason=reason)
        return c

    async def _run_pulling(
        self, session_id: str, spec: ContainerSpec, sup: _Supervised
    ) -> ContainerInfo | None:
        """Run ``spec``; if the engine lacks its image and our registry has it, pull it
        first (the session goes PULLING). None: a stop order came during the pull, which
        it cut short; nothing was started. Raises ImageNotFound with the reason to give."""
        try:
            return await self.runtime.run(spec)
        except ImageNotFound:
            if not pulls_from(self.config.registry, spec.image):
                raise ImageNotFound(f"image {spec.image!r} not found on the agent") from None
        scope = sup.pulling = anyio.CancelScope()
        with scope:
            if sup.stop_requested:
                scope.cancel()
            await self._pull(session_id, spec.image)
        sup.pulling = None
        if sup.stop_requested:
            return None
        return await self.runtime.run(spec)

    async def _pull(self, session_id: str, image: str) -> None:
        """Pull ``image`` for the session, its progress on the log (the first report makes
        it PULLING and must land; later ones are best effort), then say what we hold."""
        throttle = PullThrottle(every_s=self.config.pull_report_s)
        throttle.due(self.clock.now().timestamp(), 0, 0)
        await self._report(session_id, SessionPulling, image=image, current=0, total=0)

        async def progress(current: int, total: int) -> None:
            if throttle.due(self.clock.now().timestamp(), current, total):
                try:
                    await self._report(
                        session_id, SessionPulling, image=image, current=current, total=total
                    )
                except LogError as e:  # the next report, or RUNNING, says more
                    log.warning("agent.pull_not_reported", session=session_id, error=str(e))

        try:
            await self.runtime.pull(image, progress)
        except ImageNotFound as e:
            raise ImageNotFound(f"image {image!r} could not be pulled: {e}") from e
        held = stamp(
            AgentImagesReported,
            Provenance(self.name, self.clock.now()),
            agent_id=self.config.agent_id,
            images=tuple(await self.runtime.image_details()),
        )
        with contextlib.suppress(LogError):  # the next registration says it too
            await self.events.append(subj.agent(self.config.agent_id), held)

    async def _keep_output(self, session_id: str, container_id: str) -> None:
        """The container's last ``KEPT_OUTPUT_LINES`` lines, kept before it is removed:
        ``fgpu session logs`` reads them once the session has ended. Best effort: the end
        is reported whatever happens here."""
        v = self.state.sessions.get(session_id)
        if self.output is None or v is None:
            return
        try:
            text = await self.runtime.logs(container_id, tail=KEPT_OUTPUT_LINES)
            await self.output.keep(session_id, KeptOutput(v.owner, v.domain, text))
        except (ContainerError, OSError) as e:
            log.warning("agent.output_not_kept", session=session_id, error=str(e))

    async def _end(
        self,
        session_id: str,
        cls: type[SessionTerminated] | type[SessionErrored],
        **fields: object,
    ) -> None:
        """Report the session's end, having removed its region: the one place that happens.

        Removed before the report, so whoever sees the end on the log finds no region, and
        an agent that dies in between leaves none behind (the next one reports the session
        again and removes nothing). Removing twice is harmless, so a report that failed and
        is retried costs nothing more. Raises LogError if the report could not be appended.
        """
        if self.regions is not None:
            self.regions.remove(session_id)
        await self._report(session_id, cls, **fields)

    def _slice(self, v: SessionView) -> list[DeviceSlice]:
        """``v``'s slice of this agent's devices, per device in the container's order."""
        c = self.config
        return slices(v.devices, {g.index: g for g in c.gpus}, c.fgpu_per_gpu)

    def _create_region(self, v: SessionView, parts: Sequence[DeviceSlice]) -> str | None:
        """The session's shared region holding the slice ``parts``, if this agent
        enforces slices."""
        if self.regions is None:
            return None
        return self.regions.create(
            v.session_id, [p.mem_limit for p in parts], [p.sm_share_ppm for p in parts]
        )

    async def _vfolders(self, v: SessionView) -> tuple[Mount, ...] | str:
        """The bind mounts of ``v``'s virtual folders, as the tenancy stands now (a folder
        unshared since admission is not mounted), their directories made if new; or why
        the session cannot have them."""
        plan = mount_plan(self.state.tenancy, v.owner, v.mounts)
        if isinstance(plan, str) or not plan:
            return f"cannot mount: {plan}" if isinstance(plan, str) else ()
        root, hosts = self.config.vfolder_root, self.config.storage_hosts
        if root is None:
            return f"agent {self.config.agent_id} mounts no virtual folders"
        # The scheduler places by storage host; a session admitted before sessions said
        # theirs may still come. An empty directory made here would stand in for the folder.
        foreign = sorted({p.vfolder.host for p in plan} - set(hosts)) if hosts is not None else []
        if foreign:
            where = ", ".join(foreign)
            return f"agent {self.config.agent_id} does not mount storage host {where}"
        mounts = tuple(
            Mount(source=folder_dir(root, p.vfolder), target=p.target, read_only=p.read_only)
            for p in plan
        )
        try:
            for p in plan:
                await anyio.to_thread.run_sync(make_folder_dir, root, p.vfolder)
        except OSError as e:
            return f"cannot mount: {e}"
        return mounts

    def _opened_secrets(self, v: SessionView) -> dict[str, str] | str:
        """The values of ``v``'s secret variables, each its owner's latest as the log
        stands now; or why it cannot have them (the reason names no value)."""
        if not v.secret_env:
            return {}
        mine = self.state.secrets.of(v.owner)  # the owner's own: nobody else's is looked up
        if self.secrets is None:
            return f"agent {self.config.agent_id} holds no secrets key"
        if self.state.secrets.public_key not in (None, self.secrets.public_key):
            return f"agent {self.config.agent_id} holds another secrets key than the cluster's"
        values = {}
        for variable, name in v.secret_env:
            held = mine.get(name)
            if held is None:
                return f"no secret {name} of {v.owner}'s any more"
            try:
                values[variable] = self.secrets.open(held.sealed)
            except SecretUnreadable:
                return f"secret {name} cannot be opened with this agent's key"
        return values

    def _spec(
        self,
        v: SessionView,
        parts: Sequence[DeviceSlice],
        region_path: str | None,
        vfolders: tuple[Mount, ...] = (),
        mps: MpsClient | None = None,
    ) -> ContainerSpec:
        c = self.config
        return session_spec(
            v,
            c.agent_id,
            parts,
            request_devices=not c.mock_gpus,
            shim_lib_dir=c.shim_lib_dir if region_path is not None else None,
            region_path=region_path,
            region_group=self.regions.group if self.regions is not None else None,
            log_identity=self.log_identity,
            vfolders=vfolders,
            mps=mps,
        )

    # ---- usage from the shim --------------------------------------------------------------

    async def _report(self, session_id: str, cls: type[AnyEvent], **fields: object) -> None:
        """Append one report on the session's subject, expecting its last sequence."""
        v = self._session(session_id)
        subject = subj.agent_session(self.config.agent_id, session_id)
        prov = Provenance(self.name, self.clock.now(), v.request_id, v.correlation_id)
        e = stamp(cls, prov, session_id=session_id, agent_id=self.config.agent_id, **fields)
        seq = await self.events.append(
            subject, e, expected_last_subject_seq=self.state.subject_seq.get(subject, 0)
        )
        self.state.subject_seq[subject] = seq
