"""Fragmentation-aware placement: put a session where the unusable free fGPU grows least.

After Weng et al., "Beware of Fragmentation" (USENIX ATC '23, FGD). An agent's free fGPU is
*fragmented for* a request shape when that request could not use it: all of it if the
shape cannot go there at all (too little CPU or memory left, no device of its models, not
enough devices with a large enough free share), else the free share of every device too
small for it (or of a model it may not use). An agent's fragmentation is the sum over the
shapes the cluster is asked for, each weighted by how much fGPU it asks for in all
(``Workload.typical``: count x fGPU, so a rare shape that takes whole nodes weighs as the
GPUs it takes; FGD weighs by count alone). The policy takes, over every agent and device
choice that fits, the one whose fragmentation grows least; of equals, the one that leaves
the agent with the least fGPU and then CPU free (best fit), then the first registered.

The forecast is the recent past on the log (``services.domain.workload``), not a
distribution given in advance, so the policy follows whatever the cluster is asked for.
Before any request was seen every choice weighs the same and the best fit decides.

Everything is an exact integer (quanta x weights), so equal choices are equal and every
scheduler folding the same log decides the same.
"""

from collections.abc import Set as AbstractSet

from events import Slots
from services.domain.agent_groups import AgentGroups, AgentShape, Option, best_placement
from services.domain.allocator import Placement
from services.domain.state import ClusterState
from services.domain.workload import Shape

__all__ = ["FragmentationAware", "fragmentation", "unusable"]

_MEMO_LIMIT = 1 << 18  # remembered measures before the memo starts again


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


def fragmentation(agent: AgentShape, typical: tuple[tuple[Shape, int], ...]) -> int:
    """The weighted sum over ``typical`` of the free fGPU each shape could not use."""
    return sum(weight * unusable(agent, want) for want, weight in typical)


class FragmentationAware:
    """The policy (``placement.PlacementPolicy``). It remembers each agent shape's measure
    for as long as the forecast stays the same, and the agents' groups: caches, which
    change nothing but the time taken."""

    def __init__(self) -> None:
        self._version = -1
        self._typical: tuple[tuple[Shape, int], ...] = ()
        self._memo: dict[AgentShape, int] = {}
        self._groups = AgentGroups()

    def _measure(self, shape: AgentShape) -> int:
        memo = self._memo
        value = memo.get(shape)
        if value is None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            value = memo[shape] = fragmentation(shape, self._typical)
        return value

    def _score(self, shape: AgentShape, option: Option) -> tuple[int, ...]:
        after = option.after
        left = sum(free for _, free in after[3])
        return (self._measure(after) - self._measure(shape), left, after[1])

    def __call__(
        self,
        s: ClusterState,
        slots: Slots,
        image: str,
        unheard: AbstractSet[str] = frozenset(),
        gpu_models: tuple[str, ...] = (),
    ) -> Placement | None:
        workload = s.workload
        if workload.version != self._version:
            self._memo.clear()
            self._version = workload.version
            self._typical = workload.typical
        return best_placement(self._groups, s, slots, image, unheard, gpu_models, self._score)
