"""What an agent measures of the sessions it runs, on their usage subjects
(``fgpu.usage.<agent>.<session>``: measurements, appended without expecting a sequence):

- out-of-memory refusals as soon as the shim records them (every ``oom_poll_s``), and a
  GPU usage sample per device every ``usage_interval_s`` (memory, launches, and the GPU
  time charged against a partial slice's share: readers take a rate from two samples);
  on the way, the bytes of processes that died are given back to the slice's budget
  (kill -9 frees none of it);
- the CPU time of the interactive sessions whose group has an idle timeout, when it grew
  by at least a hundredth of a core over the interval: the idle timeout goes by silence.

All of it is best effort: a failure is logged and the next tick tries again.
"""

from collections.abc import Callable, Mapping, Sequence

import anyio
import structlog

from events import AnyEvent, GpuOomRefused, GpuUsageSampled, SessionCpuSampled, SessionType
from events import subjects as subj
from services.actors.agent_config import AgentConfig
from services.actors.common import Provenance, stamp
from services.domain.fold.cluster import ClusterState
from services.domain.gpu_slice import SHARE_FULL_PPM, host_index
from services.domain.records import SessionView
from services.ports import (
    Clock,
    ContainerError,
    ContainerRuntime,
    DeviceUsageSample,
    EventLog,
    LogError,
    SliceRegions,
)

__all__ = ["UsageMeter"]

log = structlog.get_logger()


class UsageMeter:
    """An agent's measurements of its sessions. ``state``: the agent's folded state (it
    is replaced on a rebuild: asked each time); ``running``: its sessions with a
    container, and that container's id."""

    def __init__(
        self,
        events: EventLog,
        runtime: ContainerRuntime,
        clock: Clock,
        config: "AgentConfig",
        regions: SliceRegions | None,
        *,
        state: Callable[[], ClusterState],
        running: Callable[[], dict[str, str]],
    ) -> None:
        self.events = events
        self.runtime = runtime
        self.clock = clock
        self.config = config
        self.regions = regions
        self._state = state
        self._running = running
        self._name = f"agent:{config.agent_id}"

    async def meter(self, regions: SliceRegions) -> None:
        """Publish out-of-memory refusals at once and usage samples every few seconds; give
        back the bytes of processes that died in a container (kill -9 frees no memory in
        the shared budget by itself)."""
        c = self.config
        every = max(1, round(c.usage_interval_s / c.oom_poll_s))
        tick = 0
        while True:
            await anyio.sleep(c.oom_poll_s)
            tick += 1
            for session_id in self._running():
                try:
                    regions.reclaim(session_id)
                    await self._publish_ooms(regions, session_id)
                    if tick % every == 0:
                        await self.publish_usage(session_id)
                except LogError as e:  # measurements are best effort: the next tick tries
                    log.warning("agent.usage_not_published", session=session_id, error=str(e))

    async def sample_cpu(self) -> None:
        """Report the CPU time of each interactive session whose group has an idle
        timeout, every usage interval in which it grew by at least a hundredth of a core:
        a session idle on the CPU reports nothing, which is what the idle timeout goes by.
        Others are not sampled: nothing reads it of them."""
        c = self.config
        least = int(c.usage_interval_s * 10_000_000)
        sampled: dict[str, int] = {}  # the previous interval's reading, per session

        async def sample(session_id: str, container_id: str, v: SessionView) -> None:
            try:
                used = await self.runtime.cpu_ns(container_id)
                if used is None:
                    return
                before = sampled.get(session_id)
                sampled[session_id] = used
                if before is not None and used - before < least:
                    return  # a trickle: idle this interval
                await self.publish_measured(v, SessionCpuSampled, [{"cpu_ns": used}])
            except (ContainerError, LogError) as e:  # best effort: the next tick tries
                log.warning("agent.cpu_not_sampled", session=session_id, error=str(e))

        while True:
            await anyio.sleep(c.usage_interval_s)
            # At once: the engine answers a one-shot stats call about a second late.
            running = self._running()
            async with anyio.create_task_group() as tg:
                for session_id, container_id in running.items():
                    v = self._state().sessions.get(session_id)
                    if v is not None and self._idle_limited(v):
                        tg.start_soon(sample, session_id, container_id, v)
            for gone in sampled.keys() - running.keys():
                del sampled[gone]

    def _idle_limited(self, v: SessionView) -> bool:
        """Whether ``v`` may end by idleness: interactive, its group with an idle timeout."""
        settings = self._state().tenancy.groups.get(v.group)
        interactive = v.session_type is SessionType.INTERACTIVE
        return interactive and settings is not None and settings.idle_timeout_s is not None

    async def _publish_ooms(self, regions: SliceRegions, session_id: str) -> None:
        v = self._state().sessions.get(session_id)
        ooms = regions.drain_ooms(session_id)
        if v is None or not ooms:
            return
        limits = {d.index: d.mem_limit for d in regions.sample(session_id)}
        rows = [
            {
                "gpu_index": host_index(v.devices, o.index),
                "pid": o.pid,
                "requested": o.requested,
                "mem_used": o.mem_used,
                "mem_limit": limits.get(o.index, 0),
            }
            for o in ooms
        ]
        await self.publish_measured(v, GpuOomRefused, rows)

    async def publish_usage(self, session_id: str) -> None:
        """One sample per device of the session (also its last, as it ends). Raises
        LogError."""
        v = self._state().sessions.get(session_id)
        if self.regions is None or v is None:
            return
        rows = [
            {
                "gpu_index": host_index(v.devices, d.index),
                "mem_used": d.mem_used,
                "mem_peak": d.mem_peak,
                "mem_limit": d.mem_limit,
                "launches": d.launches,
                "throttled_ns": d.throttled_ns,
                "oom_refusals": d.refusals,
                "charged_ns": _charged(d),
            }
            for d in self.regions.sample(session_id)
        ]
        await self.publish_measured(v, GpuUsageSampled, rows)

    async def publish_measured(
        self, v: SessionView, cls: type[AnyEvent], rows: Sequence[Mapping[str, object]]
    ) -> None:
        """Events of ``cls``, one per row of fields, on the session's usage subject
        (measurements: no concurrency). Raises LogError."""
        if not rows:
            return
        prov = Provenance(self._name, self.clock.now(), v.request_id, v.correlation_id)
        subject = subj.usage(self.config.agent_id, v.session_id)
        fields = {"session_id": v.session_id, "agent_id": self.config.agent_id}
        await self.events.append_many(
            [(subject, stamp(cls, prov, **fields, **row)) for row in rows]
        )


def _charged(d: DeviceUsageSample) -> int | None:
    """The GPU time charged on ``d`` in all, or None where the shim does not count it: a
    share of the whole device (or none) is not paced, so nothing is charged (an idle
    session and an unmeasured one must not read the same)."""
    return d.charged_ns if 0 < d.sm_share_ppm < SHARE_FULL_PPM else None
