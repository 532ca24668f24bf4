"""The agent's watch over what the GPU driver itself counts of its sessions' processes.

The shim holds a session to its slice from inside the container, where a hostile process
can skip it (its own environment; the real driver loaded by path) or lie in the shared
counters. The driver's per-process figures are beyond its reach. Every
``WatchSettings.interval_s`` the watch asks the driver (``GpuProcessWatch``, NVML on a real
host) which processes hold memory on which GPU, tells each process's session by its
container (``ProcessContainers``: the pid's cgroup names the container; the agent knows
each session's), and judges (``services.domain.gpu_watch``):

- a session holding more memory on a GPU than its slice, beyond the tolerance, is stopped
  at once (its container killed, no grace: a process that ignores SIGTERM keeps nothing),
  and ``gpu.over-slice`` says why on its usage subject; its end report gives the reason;
- a session using more SM time than its share, on average over a whole window, is recorded
  (``gpu.share-exceeded``), once per window it lasts, and left running.

The slice comes from the log (the session's placement), never from the region: a session
whose region cannot be read (an older format) is held to it all the same. A look that
fails (the driver away) is logged, and the next one tries again.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
import structlog

from events import AnyEvent, GpuOverSlice, GpuShareExceeded
from services.actors.agent_config import AgentConfig
from services.domain.fold.cluster import ClusterState
from services.domain.gpu_slice import slices
from services.domain.gpu_watch import (
    OverSlice,
    ShareWatch,
    held_by_session,
    over_slice,
    used_by_session,
)
from services.domain.records import SessionView
from services.domain.resources import format_mem
from services.ports import (
    GpuProcess,
    GpuProcessWatch,
    GpuUtilSample,
    GpuWatchUnavailable,
    LogError,
    ProcessContainers,
)

__all__ = ["GpuWatch"]

log = structlog.get_logger()

Publish = Callable[[SessionView, type[AnyEvent], Sequence[Mapping[str, object]]], Awaitable[None]]
_Look = tuple[list[GpuProcess], list[GpuUtilSample], dict[int, tuple[str, ...]]]


class GpuWatch:
    """One agent's watch. ``state``: the agent's folded state (asked each time);
    ``running``: its sessions with a container, and that container's id; ``stop``: stops
    a session at once, ending it with the reason given; ``publish``: appends measurements
    on a session's usage subject; ``now``: a monotonic clock in seconds (the share's
    windows are measured with it)."""

    def __init__(
        self,
        config: "AgentConfig",
        driver: GpuProcessWatch,
        containers: ProcessContainers,
        *,
        state: Callable[[], ClusterState],
        running: Callable[[], dict[str, str]],
        stop: Callable[[str, str], None],
        publish: Publish,
        now: Callable[[], float] = anyio.current_time,
    ) -> None:
        self.config = config
        self.driver = driver
        self.containers = containers
        self._state = state
        self._running = running
        self._stop = stop
        self._publish = publish
        self._now = now
        self._shares = ShareWatch(config.watch)
        self._stopped: set[str] = set()  # sessions this watch stopped, while they run

    async def run(self) -> None:
        """Look every ``WatchSettings.interval_s``, for ever."""
        while True:
            await self.look()
            await anyio.sleep(self.config.watch.interval_s)

    async def look(self) -> None:
        """Ask the driver once and act on what it says (a failure is logged, not raised)."""
        running = self._running()
        self._stopped.intersection_update(running)
        try:
            processes, samples, owners = await anyio.to_thread.run_sync(self._read)
        except GpuWatchUnavailable as e:
            log.warning("agent.gpu_watch_unavailable", error=str(e))
            return
        by_container = {container: session for session, container in running.items()}
        session_of = {
            pid: by_container[c] for pid, ids in owners.items() for c in ids if c in by_container
        }
        limits, shares = self._slices(running)
        held = held_by_session(((p.gpu_index, p.pid, p.mem) for p in processes), session_of)
        for over in over_slice(held, limits, self.config.watch):
            await self._stop_over_slice(over)
        used = used_by_session(((s.gpu_index, s.pid, s.sm_percent) for s in samples), session_of)
        for x in self._shares.look(self._now(), shares, used):
            v = self._state().sessions.get(x.session_id)
            row: dict[str, object] = {
                "gpu_index": x.gpu_index,
                "sm_share_ppm": x.sm_share_ppm,
                "used_ppm": x.used_ppm,
                "window_s": round(x.window_s),
                "pids": x.pids,
            }
            if v is not None:
                await self._measured(v, GpuShareExceeded, row)

    def _read(self) -> _Look:
        """The driver's figures and the containers of the processes they name (blocking)."""
        processes = self.driver.processes()
        samples = self.driver.utilisation()
        pids = {p.pid for p in processes} | {s.pid for s in samples}
        return processes, samples, {pid: self.containers.containers_of(pid) for pid in pids}

    def _slices(
        self, running: dict[str, str]
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """The memory limits and SM shares of the running sessions, by session and the
        agent's GPU index, as the log placed them."""
        s, c = self._state(), self.config
        gpus = {g.index: g for g in c.gpus}
        limits: dict[tuple[str, int], int] = {}
        shares: dict[tuple[str, int], int] = {}
        for session_id in running:
            v = s.sessions.get(session_id)
            if v is None or any(d.gpu_index not in gpus for d in v.devices):
                continue
            for part in slices(v.devices, gpus, c.fgpu_per_gpu):
                limits[(session_id, part.gpu.index)] = part.mem_limit
                shares[(session_id, part.gpu.index)] = part.sm_share_ppm
        return limits, shares

    async def _stop_over_slice(self, over: OverSlice) -> None:
        """Stop the session first (nothing waits on the log), then say why."""
        h = over.held
        if h.session_id in self._stopped:
            return
        self._stopped.add(h.session_id)
        reason = (
            f"stopped by the agent: its processes held {format_mem(h.bytes)} on GPU"
            f" {h.gpu_index}, over its slice of {format_mem(over.mem_limit)}"
            f" (+{format_mem(over.tolerance)} allowed)"
        )
        log.warning("agent.session_over_slice", session=h.session_id, reason=reason)
        self._stop(h.session_id, reason)
        v = self._state().sessions.get(h.session_id)
        if v is None:
            return
        row: dict[str, object] = {
            "gpu_index": h.gpu_index,
            "held": h.bytes,
            "mem_limit": over.mem_limit,
            "tolerance": over.tolerance,
            "pids": h.pids,
        }
        await self._measured(v, GpuOverSlice, row)

    async def _measured(self, v: SessionView, cls: type[AnyEvent], row: dict[str, object]) -> None:
        try:
            await self._publish(v, cls, [row])
        except LogError as e:  # the session's end report still gives the reason
            log.warning("agent.watch_not_published", session=v.session_id, error=str(e))
