"""The agent's pacing of the sessions that share a GPU (``services.domain.gpu_pacing``).

Every ``pace_interval_s`` it reads the GPU time each session's region counted on each
GPU it holds part of, asks the driver how busy each GPU was, and writes the scale of
the shares on each GPU into the sessions' pace files (``SliceRegions.set_pace``), which
their shims read at the next launch. Only sessions held to part of a GPU are paced: a
whole GPU and an MPS client's are not. Best effort: a failed look keeps the scales in
force and the next tick tries again.
"""

from collections.abc import Callable

import anyio
import structlog

from services.actors.agent_config import AgentConfig
from services.domain.fold.cluster import ClusterState
from services.domain.gpu_pacing import Counters, GpuPacing
from services.domain.gpu_slice import SHARE_FULL_PPM, host_index
from services.ports import GpuProcessWatch, GpuWatchUnavailable, SliceRegions

__all__ = ["SharePacer"]

log = structlog.get_logger()

# A session's device: (session id, its index in the container's order).
Member = tuple[str, int]


class SharePacer:
    """``running``: the agent's sessions with a container; ``state``: its folded state."""

    def __init__(
        self,
        config: AgentConfig,
        regions: SliceRegions,
        driver: GpuProcessWatch,
        *,
        state: Callable[[], ClusterState],
        running: Callable[[], dict[str, str]],
    ) -> None:
        self.config = config
        self.regions = regions
        self.driver = driver
        self._state = state
        self._running = running
        self.pacing: dict[int, GpuPacing[Member]] = {}  # by the agent's GPU index

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.config.pace_interval_s)
            members = self.members()
            busy: dict[int, float] = {}
            # The driver is asked only while some GPU is shared: the scale of a GPU with
            # one member relaxes towards 1 whatever its busy part.
            if any(len(counted) > 1 for counted in members.values()):
                try:
                    busy = await anyio.to_thread.run_sync(self.driver.busy)
                except GpuWatchUnavailable as e:
                    log.warning("agent.pacing_unavailable", error=str(e))
                    continue
            self.tick(anyio.current_time(), busy, members)

    def tick(
        self,
        now: float,
        busy: dict[int, float],
        members: dict[int, dict[Member, Counters]] | None = None,
    ) -> None:
        """One window: every paced GPU's scale from its members' counters at ``now``
        (``members``: as ``members()`` reads them, if just read)."""
        members = self.members() if members is None else members
        for gpu, counted in members.items():
            pacing = self.pacing.setdefault(gpu, GpuPacing())
            scale = pacing.step(now, counted, busy.get(gpu, 0.0))
            for session_id, index in counted:
                self.regions.set_pace(session_id, index, scale)
        for gone in self.pacing.keys() - members.keys():
            del self.pacing[gone]

    def members(self) -> dict[int, dict[Member, Counters]]:
        """The counters of each running session's partial devices, by the agent's GPU."""
        state = self._state()
        out: dict[int, dict[Member, Counters]] = {}
        for session_id in self._running():
            v = state.sessions.get(session_id)
            if v is None:
                continue
            for d in self.regions.sample(session_id):
                if not 0 < d.sm_share_ppm < SHARE_FULL_PPM:
                    continue  # a whole GPU, or an MPS client's: not paced by the shim
                gpu = host_index(v.devices, d.index)
                out.setdefault(gpu, {})[(session_id, d.index)] = Counters(
                    share=d.sm_share_ppm / SHARE_FULL_PPM,
                    charged_ns=d.charged_ns,
                    slept_ns=d.throttled_ns,
                )
        return out
