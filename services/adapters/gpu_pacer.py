"""The agent's pacing of the containers on one GPU (``services.domain.gpu_pacing``).

Each tick reads the GPU time and held-back time every container's region counted on
the GPU since the last tick, asks how busy the GPU was, and writes the scale into
every container's pace file (``gpu_shim.pace``), which the shim reads at the
container's next launch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_shim import open_region
from gpu_shim.pace import PaceFile, pace_path
from services.domain.gpu_pacing import ContainerWindow, pace_scale

__all__ = ["Counters", "GpuPacer", "PacedContainer", "region_counters"]


# A container's share on the GPU and the GPU time charged and slept there so far (ns);
# None while it cannot be read.
Counters = Callable[[], tuple[float, int, int] | None]


def region_counters(region: Path, device: int) -> tuple[float, int, int] | None:
    """What the container's region says of the device."""
    try:
        with open_region(region) as r:
            dev = r.device(device)
    except OSError:
        return None
    return dev.sm_share_ppm / 1e6, dev.charged_ns, dev.throttled_ns


class PacedContainer:
    """A container on the GPU: the pace file beside its region (created with the
    region, before the container started: a shim maps the file it finds at its start),
    which of the region's devices the GPU is, and how its counters are read (by
    default from the region)."""

    def __init__(self, region: Path, device: int, counters: Counters | None = None) -> None:
        self.region = region
        self.device = device
        self.pace = PaceFile(pace_path(region))
        self._counters = counters or (lambda: region_counters(region, device))
        self._last: tuple[int, int] | None = None

    def window(self, seconds: float) -> ContainerWindow | None:
        """Its figures since the last call (None on the first, or while unreadable)."""
        read = self._counters()
        if read is None:
            return None
        share, charged, slept = read
        last, self._last = self._last, (charged, slept)
        if last is None or seconds <= 0:
            return None
        per_ns = 1.0 / (seconds * 1e9)
        return ContainerWindow(
            share=share,
            busy=max(0, charged - last[0]) * per_ns,
            slept=max(0, slept - last[1]) * per_ns,
        )


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
        self.scale = 1.0
        self._gpu_busy = gpu_busy
        self._clock = clock
        self._t = clock()

    def tick(self) -> float:
        """One window: read, decide, write. Returns the scale now in force."""
        t = self._clock()
        seconds, self._t = t - self._t, t
        windows = [w for c in self.containers if (w := c.window(seconds)) is not None]
        busy = self._gpu_busy()
        if windows:
            self.scale = pace_scale(windows, busy, self.scale)
        for c in self.containers:
            c.pace.set_scale(c.device, self.scale)
        return self.scale

    def close(self) -> None:
        for c in self.containers:
            c.pace.close()
