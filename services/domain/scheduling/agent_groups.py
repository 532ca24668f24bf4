"""Agents grouped by what a placement policy sees of them, kept up to date as they change.

A policy that weighs every agent (pack, spread, fragmentation-aware) need not weigh two
alike ones twice: agents with the same free CPU, memory and device shares (by model) give
the same choices with the same scores, and the first registered of them wins a tie. So
such a policy weighs one agent per group. Thousands of identical nodes, as a cluster
starts, are one group; the groups are refiled from the fit index's feed of changed agents
(``FitIndex.take_touched``), so a placement costs the number of groups, not of agents.
"""

from bisect import insort
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from typing import NamedTuple, cast

from events import DevicePlacement, Slots
from services.domain.fold.cluster import ClusterState
from services.domain.fold.fit_index import FitIndex
from services.domain.records import AgentView
from services.domain.scheduling.allocator import Placement, usable

__all__ = [
    "AgentGroups",
    "AgentShape",
    "Best",
    "Memo",
    "Option",
    "agent_shape",
    "best_placement",
    "options",
]

# What a policy sees of an agent: fGPU per device, free CPU, free memory, and each
# device's (model, free share), sorted.
AgentShape = tuple[int, int, int, tuple[tuple[str, int], ...]]


def agent_shape(a: AgentView) -> AgentShape:
    free = a.free
    devices = tuple(sorted((g.info.model, g.free) for g in a.gpus.values()))
    return (a.fgpu_per_gpu, free.cpu, free.mem, devices)


class Option(NamedTuple):
    """One way to place on an agent of a shape: the (model, free share, quanta taken) of
    each device used, and the shape it leaves."""

    taken: tuple[tuple[str, int, int], ...]
    after: AgentShape


def _left(shape: AgentShape, slots: Slots, taken: tuple[tuple[str, int, int], ...]) -> AgentShape:
    per, cpu, mem, devices = shape
    rest = list(devices)
    for model, free, quanta in taken:
        rest.remove((model, free))
        rest.append((model, free - quanta))
    return (per, cpu - slots.cpu, mem - slots.mem, tuple(sorted(rest)))


def options(shape: AgentShape, slots: Slots, gpu_models: tuple[str, ...]) -> list[Option]:
    """Every way an agent of ``shape`` can take ``slots`` on devices of ``gpu_models``
    (empty: any) that could matter: devices of one model with one free share are
    interchangeable, so each such pair is offered once. None if CPU or memory lack."""
    per, cpu, mem, devices = shape
    if slots.cpu > cpu or slots.mem > mem:
        return []
    need = slots.fgpu
    if need <= 0:
        return [Option((), _left(shape, slots, ()))]
    usable_devices = [d for d in devices if not gpu_models or d[0] in gpu_models]
    whole, rest = divmod(need, per) if need > per else (0, need)
    full = [d for d in usable_devices if d[1] == per][:whole]
    if len(full) < whole:
        return []
    base = tuple((model, free, per) for model, free in full)
    if not rest:
        return [Option(base, _left(shape, slots, base))]
    others = list(usable_devices)
    for d in full:
        others.remove(d)
    out = []
    for model, free in dict.fromkeys(d for d in others if d[1] >= rest):
        taken = (*base, (model, free, rest))
        out.append(Option(taken, _left(shape, slots, taken)))
    return out


def _devices(a: AgentView, taken: tuple[tuple[str, int, int], ...]) -> tuple[DevicePlacement, ...]:
    """``taken`` on ``a``: each on the lowest device of its model and free share not
    used by the one before."""
    used: set[int] = set()
    out = []
    for model, free, quanta in taken:
        index = min(
            i
            for i, g in a.gpus.items()
            if i not in used and g.info.model == model and g.free == free
        )
        used.add(index)
        out.append(DevicePlacement(gpu_index=index, fgpu=quanta))
    return tuple(out)


class AgentGroups:
    """Every agent of a state, grouped by ``agent_shape``, each group in order of
    registration. A cache of the state: ``sync`` brings it up to date."""

    def __init__(self) -> None:
        self._fit: FitIndex | None = None
        self._rank: dict[str, int] = {}  # agent id -> order of registration
        self._shape: dict[str, AgentShape] = {}
        self._groups: dict[AgentShape, list[tuple[int, str]]] = {}

    def sync(self, s: ClusterState) -> None:
        """Refile the agents changed since the last call (all of them for a new state)."""
        if s.fit is not self._fit:
            self._fit = s.fit
            self._rank.clear()
            self._shape.clear()
            self._groups.clear()
            s.fit.take_touched()
            changed: list[str] = list(s.agents)
        else:
            changed = s.fit.take_touched()
        for agent_id in changed:
            self._refile(s, agent_id)

    def _refile(self, s: ClusterState, agent_id: str) -> None:
        rank = self._rank.setdefault(agent_id, len(self._rank))
        old = self._shape.pop(agent_id, None)
        if old is not None:
            members = self._groups[old]
            members.remove((rank, agent_id))
            if not members:
                del self._groups[old]
        a = s.agents.get(agent_id)
        if a is None:
            return
        shape = agent_shape(a)
        self._shape[agent_id] = shape
        insort(self._groups.setdefault(shape, []), (rank, agent_id))

    def shape_of(self, agent_id: str) -> AgentShape | None:
        return self._shape.get(agent_id)

    def first_usable(
        self,
        s: ClusterState,
        shape: AgentShape,
        slots: Slots,
        image: str,
        unheard: AbstractSet[str],
    ) -> tuple[int, AgentView] | None:
        """The first registered agent of ``shape`` that may take the session, and its rank."""
        for rank, agent_id in self._groups.get(shape, ()):
            a = s.agents[agent_id]
            if usable(a, slots, image, unheard):
                return rank, a
        return None

    def shapes(self) -> Iterator[AgentShape]:
        return iter(self._groups)


# A group shape's best option for a request and its score (None: it cannot take it).
Best = tuple[tuple[int, ...], Option] | None
# Each (group shape, request's CPU, memory, fGPU and models): its best option.
Memo = dict[tuple[AgentShape, int, int, int, tuple[str, ...]], Best]
_MEMO_LIMIT = 1 << 18  # remembered best options before the memo starts again
_UNKNOWN = object()


def _best_option(
    shape: AgentShape,
    slots: Slots,
    gpu_models: tuple[str, ...],
    score: Callable[[AgentShape, Option], tuple[int, ...]],
    memo: "Memo | None",
) -> Best:
    key = (shape, slots.cpu, slots.mem, slots.fgpu, gpu_models)
    if memo is not None:
        known = memo.get(key, _UNKNOWN)
        if known is not _UNKNOWN:
            return cast(Best, known)
    found: Best = None
    for option in options(shape, slots, gpu_models):
        value = score(shape, option)
        if found is None or value < found[0]:
            found = (value, option)
    if memo is not None:
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = found
    return found


def best_placement(
    groups: AgentGroups,
    s: ClusterState,
    slots: Slots,
    image: str,
    unheard: AbstractSet[str],
    gpu_models: tuple[str, ...],
    score: Callable[[AgentShape, Option], tuple[int, ...]],
    memo: "Memo | None" = None,
) -> Placement | None:
    """The placement of least ``score`` (then the first registered agent) over one agent
    per group; ``groups`` is synced with ``s`` first. ``memo``: each group shape's best
    option for a request, kept by the caller for as long as ``score`` stays the same."""
    groups.sync(s)
    best: tuple[tuple[int, ...], int, AgentView, Option] | None = None
    for shape in groups.shapes():
        mine = _best_option(shape, slots, gpu_models, score, memo)
        if mine is None:
            continue
        first = groups.first_usable(s, shape, slots, image, unheard)
        if first is None:
            continue
        rank, a = first
        key, option = mine
        if best is None or (key, rank) < (best[0], best[1]):
            best = (key, rank, a, option)
    if best is None:
        return None
    a, option = best[2], best[3]
    return a.agent_id, _devices(a, option.taken)
