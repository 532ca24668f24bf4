"""How much the agent scales the SM shares of the containers on one GPU. Pure.

A time-sliced GPU loses time switching between busy contexts (about 11 % on an H100
for two matmul loops), and that time is in neither container's GPU time. A container
held to its share keeps all of its share while the others can only take what is
left, so the small share of a pair gets more than its part of what the card delivers
(0.25 + 0.75 split 0.285 / 0.715). The agent sees every container of the GPU, so it
scales their shares by what the card delivers: while the GPU is saturated, at least
one container is held back by its share and the active containers together get less
than their shares, every share is scaled by ``delivered / shares``. Then each one's
part of what the card delivers is its share's part. Otherwise the scale relaxes back
towards 1 a step per window, so a container that stops competing gives the time back.
"""

from collections.abc import Hashable, Mapping, Sequence
from typing import Generic, TypeVar

import msgspec

__all__ = ["ContainerWindow", "Counters", "GpuPacing", "pace_scale"]

# The GPU is saturated when it ran work this much of the window (NVML's utilisation).
SATURATED = 0.95
# A container is competing when its GPU time is at least this part of the window.
ACTIVE = 0.02
# A container is held back by its share when it slept at least this part of the window.
HELD_BACK = 0.02
RELAX_STEP = 0.1
MIN_SCALE = 0.25  # the shim never scales a share below a quarter (FGPU_PACE_MIN_PPM)


class ContainerWindow(msgspec.Struct, frozen=True, kw_only=True):
    """One container on the GPU over the last window, each figure a part of it."""

    share: float
    busy: float  # GPU time charged
    slept: float  # time its launches were held back by its share


def pace_scale(windows: Sequence[ContainerWindow], gpu_busy: float, previous: float) -> float:
    """The scale for every share on the GPU for the next window."""
    relaxed = min(1.0, previous + RELAX_STEP)
    active = [w for w in windows if w.busy >= ACTIVE]
    if len(active) < 2 or gpu_busy < SATURATED:
        return relaxed
    if not any(w.slept >= HELD_BACK for w in active):
        return relaxed
    shares = sum(w.share for w in active)
    delivered = sum(w.busy for w in active)
    if delivered >= shares:
        return relaxed
    return max(MIN_SCALE, delivered / shares)


class Counters(msgspec.Struct, frozen=True, kw_only=True):
    """What a container's region has counted on the GPU so far."""

    share: float
    charged_ns: int
    slept_ns: int


K = TypeVar("K", bound=Hashable)


class GpuPacing(Generic[K]):
    """One GPU's pacing across windows: each member's counters at the last step and the
    scale in force. A member seen for the first time (or again after a gap) has no
    window yet; one gone is forgotten."""

    def __init__(self) -> None:
        self.scale = 1.0
        self._last: dict[K, Counters] = {}
        self._at: float | None = None

    def step(self, now: float, members: Mapping[K, Counters], gpu_busy: float) -> float:
        """The scale for the next window, given every member's counters at ``now``."""
        seconds = 0.0 if self._at is None else now - self._at
        windows = []
        for key, c in members.items():
            last = self._last.get(key)
            if last is not None and seconds > 0:
                per_ns = 1.0 / (seconds * 1e9)
                busy = max(0, c.charged_ns - last.charged_ns) * per_ns
                slept = max(0, c.slept_ns - last.slept_ns) * per_ns
                windows.append(ContainerWindow(share=c.share, busy=busy, slept=slept))
        self._last = dict(members)
        self._at = now
        if windows:
            self.scale = pace_scale(windows, gpu_busy, self.scale)
        elif len(members) < 2:
            self.scale = 1.0
        return self.scale
