"""A pacer over pace files and counters given to it: ``scripts/gpu-check`` paces its pairs
with it as the agent paces a GPU's sessions (``services.actors.agent_pacing``), both
through ``services.domain.gpu_pacing.GpuPacing``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_shim.pace import PaceFile, pace_path
from services.domain.gpu_pacing import Counters, GpuPacing

__all__ = ["GpuPacer", "PacedContainer"]


class PacedContainer:
    """A container on the GPU: the pace file beside its region (created with the
    region, before the container started: a shim maps the file it finds at its start),
    which of the region's devices the GPU is, and how its counters are read (None while
    they cannot be)."""

    def __init__(self, region: Path, device: int, counters: Callable[[], Counters | None]) -> None:
        self.region = region
        self.device = device
        self.counters = counters
        self.pace = PaceFile(pace_path(region))


class GpuPacer:
    """Keeps the scale of one GPU's containers; ``gpu_busy`` says how much of the last
    window the GPU ran work (0..1, e.g. NVML's utilisation)."""

    def __init__(
        self,
        containers: Sequence[PacedContainer],
        gpu_busy: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.containers = list(containers)
        self.pacing: GpuPacing[int] = GpuPacing()
        self._gpu_busy = gpu_busy
        self._clock = clock

    def tick(self) -> float:
        """One window: read, decide, write. Returns the scale now in force."""
        members = {i: c for i, pc in enumerate(self.containers) if (c := pc.counters())}
        scale = self.pacing.step(self._clock(), members, self._gpu_busy())
        for pc in self.containers:
            pc.pace.set_scale(pc.device, scale)
        return scale

    def close(self) -> None:
        for c in self.containers:
            c.pace.close()
