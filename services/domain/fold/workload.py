"""What the cluster is asked for: the shapes of recent admitted requests, folded from the log.

The fragmentation-aware placement (``services.domain.scheduling.fragmentation``)
measures how much of an agent's free fGPU the requests to come could not use; it needs to
know what those requests look like, and takes the recent past as the forecast. The window
and the points at which the forecast is renewed are fixed, so it is a pure function of the
log: every scheduler folding the same log weighs against the same shapes.
"""

from collections import deque
from typing import NamedTuple

__all__ = ["REFRESH_EVERY", "WINDOW", "Shape", "Workload"]

# The requests the forecast is drawn from: the latest WINDOW admitted. Renewed at 16, 32,
# 64, ... admissions, then every REFRESH_EVERY: between renewals it stays the same, so
# what the placement derived from it can be kept.
WINDOW = 8192
REFRESH_EVERY = 1024
_FIRST_REFRESH = 16
# The forecast keeps the most demanding shapes that make up this share of the window's
# fGPU demand (per mille), at most _MOST of them: the rest are too rare to weigh.
_COVER_PER_MILLE = 990
_MOST = 64


class Shape(NamedTuple):
    """What one request needs: ``fgpu`` quanta in all (0: CPU only), ``cpu`` milli-cores,
    ``mem`` bytes, on devices of one of ``gpu_models`` (empty: any)."""

    fgpu: int
    cpu: int
    mem: int
    gpu_models: tuple[str, ...] = ()


class Workload:
    """The latest ``WINDOW`` shapes admitted, and the forecast drawn from them.

    ``typical``: the shapes that ask for fGPU, each with its weight, its share of the fGPU
    asked for (count x fGPU, so a shape counts as much as the GPU it takes); ``version``
    changes exactly when ``typical`` does.
    """

    __slots__ = ("_canon", "_counts", "_recent", "admitted", "typical", "version")

    def __init__(self) -> None:
        self._recent: deque[Shape] = deque()
        self._counts: dict[Shape, int] = {}
        # One object per distinct shape in the window: the window holds references to
        # these, 8 bytes an admission, not a tuple of its own each (a few kinds of request
        # fill the whole window).
        self._canon: dict[Shape, Shape] = {}
        self.admitted = 0
        self.typical: tuple[tuple[Shape, int], ...] = ()
        self.version = 0

    def note(self, shape: Shape) -> None:
        """One more request admitted."""
        self._add(shape)
        if len(self._recent) > WINDOW:
            gone = self._recent.popleft()
            left = self._counts[gone] - 1
            if left:
                self._counts[gone] = left
            else:
                del self._counts[gone], self._canon[gone]
        self.admitted += 1
        n = self.admitted
        if (n >= _FIRST_REFRESH and n & (n - 1) == 0 and n <= WINDOW) or (
            n > WINDOW and n % REFRESH_EVERY == 0
        ):
            self._renew()

    def parts(self) -> tuple[list[Shape], int, tuple[tuple[Shape, int], ...], int]:
        """What it holds (the window, admissions, the forecast and its version), as
        ``of`` takes it back: a snapshot restores exactly this forecast."""
        return list(self._recent), self.admitted, self.typical, self.version

    @classmethod
    def of(
        cls,
        recent: list[Shape],
        admitted: int,
        typical: tuple[tuple[Shape, int], ...],
        version: int,
    ) -> "Workload":
        w = cls()
        for shape in recent:
            w._add(shape)
        w.admitted, w.typical, w.version = admitted, typical, version
        return w

    def _add(self, shape: Shape) -> None:
        shape = self._canon.setdefault(shape, shape)
        self._recent.append(shape)
        self._counts[shape] = self._counts.get(shape, 0) + 1

    def _renew(self) -> None:
        demand = sorted(
            ((shape, count * shape.fgpu) for shape, count in self._counts.items() if shape.fgpu),
            key=lambda sw: (-sw[1], sw[0]),
        )
        total = sum(w for _, w in demand)
        kept: list[tuple[Shape, int]] = []
        covered = 0
        for shape, weight in demand[:_MOST]:
            kept.append((shape, weight))
            covered += weight
            if covered * 1000 >= total * _COVER_PER_MILLE:
                break
        self.typical = tuple(kept)
        self.version += 1
