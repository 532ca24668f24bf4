"""What DRF weighs, kept by the fold: per resource group, the capacity of its agents and
what each user's sessions hold on them.

A DRF round orders users by their dominant share of the group (``queue_order``); walking
the group's agents and their sessions for it cost a round tens of milliseconds at 40,000
running sessions. The fold keeps both sums as allocations come and go instead, so a round
reads them at once.

Invariant: ``capacity(g)`` is the sum over the agents serving ``g`` (lost ones too: they
may come back) of their CPU, memory and fGPU (devices x fGPU per device), and ``held(g)``
maps each user (``pending.user_of``) to the slots of the sessions allocated on those
agents. Entries that sum to nothing are dropped, so a state folded record by record and
one rebuilt from a snapshot compare equal.
"""

from collections.abc import Iterable, Mapping

from events import Slots
from services.domain.fold.pending import user_of
from services.domain.records import AgentView, SessionView
from services.domain.resources import add, sub

__all__ = ["GroupShares", "agent_capacity"]

_NONE = Slots()


def agent_capacity(a: "AgentView") -> Slots:
    """What one agent gives its group: its CPU and memory, and its devices' fGPU."""
    return Slots(cpu=a.capacity.cpu, mem=a.capacity.mem, fgpu=len(a.gpus) * a.fgpu_per_gpu)


class GroupShares:
    __slots__ = ("_capacity", "_held")

    def __init__(self) -> None:
        self._capacity: dict[str, Slots] = {}  # group -> its agents' capacity
        self._held: dict[str, dict[str, Slots]] = {}  # group -> user -> held there

    def agent(
        self,
        before: "AgentView | None",
        after: "AgentView",
        sessions: Mapping[str, "SessionView"],
    ) -> None:
        """Agent ``after`` registered (``before``: as it was, None if new). Its sessions
        stay allocated: if it moved to another group, what they hold moves with it."""
        if before is not None:
            _put(
                self._capacity,
                before.group,
                sub(self.capacity(before.group), agent_capacity(before)),
            )
            if before.group != after.group:
                held = [sessions[sid] for sid in before.sessions]
                self._move(held, before.group, -1)
                self._move(held, after.group, +1)
        _put(self._capacity, after.group, add(self.capacity(after.group), agent_capacity(after)))

    def allocated(self, group: str, v: "SessionView") -> None:
        """``v`` was allocated on an agent of ``group``."""
        self._move((v,), group, +1)

    def taken_back(self, group: str, v: "SessionView") -> None:
        """``v``'s allocation on an agent of ``group`` was given back."""
        self._move((v,), group, -1)

    def _move(self, views: Iterable["SessionView"], group: str, sign: int) -> None:
        held = self._held.setdefault(group, {})
        for v in views:
            who = user_of(v)
            now = held.get(who, _NONE)
            _put(held, who, add(now, v.slots) if sign > 0 else sub(now, v.slots))
        if not held:
            del self._held[group]

    def capacity(self, group: str) -> Slots:
        return self._capacity.get(group, _NONE)

    def held(self, group: str) -> Mapping[str, Slots]:
        """Each user's slots held on ``group``'s agents (read only; absent: none)."""
        return self._held.get(group, {})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupShares):
            return NotImplemented
        return self._capacity == other._capacity and self._held == other._held

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"GroupShares({self._capacity}, {self._held})"


def _put(d: dict[str, Slots], key: str, value: Slots) -> None:
    if value == _NONE:
        d.pop(key, None)
    else:
        d[key] = value
