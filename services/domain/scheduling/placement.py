"""Placement policies: which agent and devices a session gets, by name.

Every policy is a pure function of the folded state (or an object whose cache is only a
cache: the same state gives the same answer), with one signature, ``PlacementPolicy``;
the scheduler is given one by name (``fgpu scheduler --policy``), and a resource group
can carry the name the same way. Each keeps the same rules of what fits (``allocator``):
CPU, memory and fGPU free on the agent, a share of one device for at most one device's
worth, whole free devices plus one share beyond, only devices of the models the session
names. Among what fits they differ:

- ``best-fit`` (the default): the tightest device, through the fit index, on the fullest
  agent of those; a CPU-only session where the least fGPU is free.
- ``pack``: the agent with the least fGPU left after it (then the least CPU), the
  tightest device there: fills agents one after another.
- ``spread``: the agent with the most fGPU left after it (then the most CPU), the
  emptiest device there: load evenly over agents and devices.
- ``round-robin``: the first agent that fits after the one that got the latest
  placement, in order of registration; its first device that fits.
- ``fragmentation-aware``: where the free fGPU that the workload's requests could not
  use (too small a share, or too little CPU to serve it) grows least, scarce models kept
  for the requests that need them (``services.domain.scheduling.fragmentation``).

Ties go to the agent registered first, so a policy's answer is the same in every
scheduler that folds the same log.
"""

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Protocol

from events import Slots
from services.domain.fold.cluster import ClusterState
from services.domain.scheduling.agent_groups import AgentGroups, AgentShape, Option, best_placement
from services.domain.scheduling.allocator import Placement, device_options, place, usable
from services.domain.scheduling.fragmentation import FragmentationAware
from services.domain.tenancy.groups import POLICY_NAMES

__all__ = [
    "DEFAULT_POLICY",
    "POLICY_NAMES",
    "PlacementPolicy",
    "UnknownPolicy",
    "pack",
    "policy",
    "round_robin",
    "spread",
]


class PlacementPolicy(Protocol):
    def __call__(
        self,
        s: ClusterState,
        slots: Slots,
        image: str,
        unheard: AbstractSet[str] = ...,
        gpu_models: tuple[str, ...] = ...,
    ) -> Placement | None:
        """The agent and devices for a session needing ``slots`` of ``image`` on devices
        of ``gpu_models`` (empty: any), or None if nothing fits now; nothing on agents in
        ``unheard``."""
        ...


class UnknownPolicy(ValueError):
    """No placement policy has this name; the message lists those there are."""


def _share_left(option: Option) -> int:
    """The free share left on the last device the option takes from (0 if none)."""
    if not option.taken:
        return 0
    _, free, quanta = option.taken[-1]
    return free - quanta


def _fgpu_left(shape: AgentShape) -> int:
    return sum(free for _, free in shape[3])


class _Scored:
    """A policy that takes the placement of least score, one agent per group weighed."""

    def __init__(self, score: Callable[[AgentShape, Option], tuple[int, ...]]) -> None:
        self._score = score
        self._groups = AgentGroups()

    def __call__(
        self,
        s: ClusterState,
        slots: Slots,
        image: str,
        unheard: AbstractSet[str] = frozenset(),
        gpu_models: tuple[str, ...] = (),
    ) -> Placement | None:
        return best_placement(self._groups, s, slots, image, unheard, gpu_models, self._score)


def _pack(shape: AgentShape, option: Option) -> tuple[int, ...]:
    after = option.after
    return (_fgpu_left(after), after[1], _share_left(option))


def _spread(shape: AgentShape, option: Option) -> tuple[int, ...]:
    after = option.after
    return (-_fgpu_left(after), -after[1], -_share_left(option))


def pack() -> PlacementPolicy:
    """The fullest agent that fits (least fGPU, then CPU, left after), its tightest device."""
    return _Scored(_pack)


def spread() -> PlacementPolicy:
    """The emptiest agent that fits (most fGPU, then CPU, left after), its emptiest device."""
    return _Scored(_spread)


def round_robin(
    s: ClusterState,
    slots: Slots,
    image: str,
    unheard: AbstractSet[str] = frozenset(),
    gpu_models: tuple[str, ...] = (),
) -> Placement | None:
    """The first agent that fits after the latest one placed on (in order of
    registration, going round), its lowest devices that fit."""
    order = list(s.agents)
    start = 0
    if s.last_placed is not None and s.last_placed in s.agents:
        start = order.index(s.last_placed) + 1
    for agent_id in order[start:] + order[:start]:
        a = s.agents[agent_id]
        if usable(a, slots, image, unheard):
            choices = device_options(a, slots.fgpu, gpu_models)
            if choices:
                return agent_id, min(choices, key=lambda d: [p.gpu_index for p in d])
    return None


_POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    "best-fit": lambda: place,
    "pack": pack,
    "spread": spread,
    "round-robin": lambda: round_robin,
    "fragmentation-aware": FragmentationAware,
}
if tuple(_POLICIES) != POLICY_NAMES:  # the tenancy checks groups' policies by those names
    raise AssertionError(f"placement policies {tuple(_POLICIES)} are not {POLICY_NAMES}")
DEFAULT_POLICY = "best-fit"


def policy(name: str) -> PlacementPolicy:
    """The policy called ``name`` (a fresh one: a policy may keep a cache). Raises
    UnknownPolicy."""
    make = _POLICIES.get(name)
    if make is None:
        raise UnknownPolicy(f"no placement policy {name!r}; there are {', '.join(POLICY_NAMES)}")
    return make()
