"""Fragmentation-aware placement: put a session where the free fGPU that the requests to
come could not use grows least.

After Weng et al., "Beware of Fragmentation" (USENIX ATC '23, FGD), with two terms FGD
lacks. An agent's measure against the forecast (``Workload.typical``, shapes weighted by
the fGPU they ask for) is the sum of three parts, each in weighted quanta:

- *Fragmented* (FGD's): the free fGPU each shape could not use there (``unusable``): all
  of it if the shape cannot go there at all (too little CPU or memory left, no device of
  its models, not enough devices with a large enough free share), else the free share of
  every device too small for it.
- *Stranded by CPU* (``stranded``): the free fGPU beyond what the agent's free CPU can
  serve at the forecast's CPU per quantum, times ``_STRAND`` x the forecast's weight.
  FGD sees CPU only once a shape no longer fits; this sees the GPUs that the CPU left
  cannot keep busy before that, so CPU-hungry requests go where CPU is plentiful.
- Shapes that must run on some models weigh as their demand per device they may use:
  their weight times the cluster's devices over the devices of their models.

And a placement pays for what it takes from models some shapes must have: an unrestricted
request pays ``_RESERVE`` x, per quantum taken from a device of model M, the weight of the
shapes that may use M, so it leaves scarce models to those that need them (FGD lets them
be eaten: using a device whole fragments nothing).

The policy takes the choice whose measure grows least plus what it pays; of equals, the
one that leaves the agent the least fGPU and then CPU free (best fit), then the first
registered. The forecast is the recent past on the log, so the policy follows whatever
the cluster is asked for; before any request was seen every choice weighs the same and
the best fit decides. Everything is an exact integer, so every scheduler folding the same
log decides the same.
"""

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from events import Slots
from services.domain.fold.cluster import ClusterState
from services.domain.fold.workload import Shape
from services.domain.scheduling.agent_groups import (
    AgentGroups,
    AgentShape,
    Memo,
    Option,
    best_placement,
)
from services.domain.scheduling.allocator import Placement

__all__ = ["Forecast", "FragmentationAware", "fragmentation", "stranded", "unusable"]

_MEMO_LIMIT = 1 << 18  # remembered measures before the memo starts again
# How much the CPU-stranded fGPU and the scarce models' toll weigh against FGD's
# fragmentation, the same on every trace: _STRAND chosen on the default openb trace (from 2
# to 8 about the same), _RESERVE on gpuspec10, the one with restricted requests (2 and 4
# about the same; at 1 too light to keep a scarce model). bench/fragmentation.py measures.
_STRAND = 4
_RESERVE = 4

Typical = tuple[tuple[Shape, int], ...]


def unusable(agent: AgentShape, want: Shape) -> int:
    """The free fGPU of an agent of shape ``agent`` that a request of shape ``want``
    could not use."""
    per, cpu, mem, devices = agent
    total = sum(free for _, free in devices)
    if want.cpu > cpu or want.mem > mem or want.fgpu <= 0:
        return total
    models = want.gpu_models
    whole, rest = divmod(want.fgpu, per) if want.fgpu > per else (0, want.fgpu)
    smallest = rest if rest else per  # a device with less free serves no part of it
    full = 0  # devices entirely free
    share = False  # a device not entirely free that can take the share beyond them
    stranded = 0
    for model, free in devices:
        if models and model not in models:
            stranded += free
            continue
        if free == per:
            full += 1
        elif rest and free >= rest:
            share = True
        if free < smallest:
            stranded += free
    fits = full >= whole + (1 if rest and not share else 0)
    return stranded if fits else total


def stranded(agent: AgentShape, cpu_per: int, fgpu_per: int) -> int:
    """The free fGPU of ``agent`` beyond what its free CPU serves at ``cpu_per``
    milli-cores for every ``fgpu_per`` quanta, in quanta x ``cpu_per`` (exact)."""
    _, cpu, _, devices = agent
    total = sum(free for _, free in devices)
    return max(0, total * cpu_per - cpu * fgpu_per)


class Forecast:
    """The forecast as the policy weighs it, for one ``Workload.typical`` and the
    cluster's devices per model (``supply``)."""

    __slots__ = ("_scale", "cpu_per", "fgpu_per", "pressure", "typical", "weight")

    def __init__(self, typical: Typical, supply: Mapping[str, int]) -> None:
        everything = sum(supply.values())
        weighted = []
        for shape, weight in typical:
            if shape.gpu_models:
                mine = sum(supply.get(m, 0) for m in shape.gpu_models)
                weight = weight * everything // max(mine, 1)
            weighted.append((shape, weight))
        self.typical: Typical = tuple(weighted)
        self.weight = sum(w for _, w in weighted)
        # The forecast's CPU per quantum, as cpu_per milli-cores for fgpu_per quanta.
        self.cpu_per = sum(w * s.cpu for s, w in weighted)
        self.fgpu_per = sum(w * s.fgpu for s, w in weighted)
        self._scale = max(self.cpu_per, 1)
        # Per model, the weight of the restricted shapes that may use it.
        pressure: dict[str, int] = {}
        for shape, weight in weighted:
            for model in shape.gpu_models:
                pressure[model] = pressure.get(model, 0) + weight
        self.pressure = pressure

    def measure(self, agent: AgentShape) -> int:
        """The agent's fragmented plus CPU-stranded fGPU, weighted, in exact units (x the
        forecast's CPU weight)."""
        frag = sum(weight * unusable(agent, want) for want, weight in self.typical)
        strand = stranded(agent, self.cpu_per, self.fgpu_per) if self.fgpu_per else 0
        return frag * self._scale + _STRAND * self.weight * strand

    def toll(self, option: Option) -> int:
        """What an unrestricted request pays for the devices ``option`` takes, in the
        units of ``measure``."""
        return _RESERVE * self._scale * sum(q * self.pressure.get(m, 0) for m, _, q in option.taken)


def fragmentation(agent: AgentShape, typical: Typical) -> int:
    """The weighted sum over ``typical`` of the free fGPU each shape could not use (FGD's
    measure alone)."""
    return sum(weight * unusable(agent, want) for want, weight in typical)


def _supply(s: ClusterState) -> dict[str, int]:
    supply: dict[str, int] = {}
    for a in s.agents.values():
        for g in a.gpus.values():
            supply[g.info.model] = supply.get(g.info.model, 0) + 1
    return supply


class FragmentationAware:
    """The policy (``placement.PlacementPolicy``). It remembers each agent shape's measure
    for as long as the forecast and the agents registered stay the same, and the agents'
    groups: caches, which change nothing but the time taken."""

    def __init__(self) -> None:
        self._key: tuple[int, int] = (-1, -1)
        self._forecast = Forecast((), {})
        self._memo: dict[AgentShape, int] = {}
        self._best: Memo = {}  # a group shape's best option per request, as _score gives
        self._groups = AgentGroups()
        self._restricted = False

    def _measure(self, shape: AgentShape) -> int:
        memo = self._memo
        value = memo.get(shape)
        if value is None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            value = memo[shape] = self._forecast.measure(shape)
        return value

    def _score(self, shape: AgentShape, option: Option) -> tuple[int, ...]:
        after = option.after
        grows = self._measure(after) - self._measure(shape)
        if not self._restricted:
            grows += self._forecast.toll(option)
        left = sum(free for _, free in after[3])
        return (grows, left, after[1])

    def __call__(
        self,
        s: ClusterState,
        slots: Slots,
        image: str,
        unheard: AbstractSet[str] = frozenset(),
        gpu_models: tuple[str, ...] = (),
    ) -> Placement | None:
        workload = s.workload
        key = (workload.version, len(s.agents))
        if key != self._key:
            self._memo.clear()
            self._best.clear()
            self._key = key
            self._forecast = Forecast(workload.typical, _supply(s))
        self._restricted = bool(gpu_models)
        return best_placement(
            self._groups, s, slots, image, unheard, gpu_models, self._score, self._best
        )
