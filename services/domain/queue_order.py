"""DRF order: which of a group's pending sessions is tried next (FIFO and LIFO need no
more than the fold's ``PendingQueue``; see ``schedule_round``).

- DRF (dominant resource fairness, Ghodsi et al., NSDI '11): priority first; among sessions of one
  priority, the next is the earliest of the user whose dominant share is least. A user's
  dominant share is the largest of its CPU, memory and fGPU held in the group (by
  sessions placed on the group's agents) over the group's capacity of each. The order is
  lazy: each time a session is taken, the scheduler has placed (or skipped) the one
  before, and a user's share counts what was placed this round. Shares are exact
  fractions, so every scheduler of one log takes the same order.

Each is a pure function of the folded state; a user is its name (its access key on a
cluster without tenancy).
"""

import heapq
from collections import deque
from collections.abc import Iterator
from fractions import Fraction

from events import Slots
from services.domain.resources import add
from services.domain.status import HOLDS_ALLOCATION
from services.domain.views import AgentView, ClusterState, SessionView

__all__ = ["dominant_share", "drf_order", "group_capacity", "held_by_user", "user_of"]


def drf_order(s: ClusterState, group: str, queue: list[str]) -> Iterator[str]:
    """``queue`` (pending sessions of ``group``) in DRF order, lazily (see above)."""
    return _drf(s, group, queue)


def user_of(v: SessionView) -> str:
    """Whose share a session counts in: its user, else its access key."""
    return v.user if v.user is not None else v.owner


def _agents(s: ClusterState, group: str) -> list[AgentView]:
    return [a for a in s.agents.values() if a.group == group]


def group_capacity(s: ClusterState, group: str) -> Slots:
    """The CPU, memory and fGPU of the group's agents (lost ones too: they may come back)."""
    total = Slots()
    for a in _agents(s, group):
        total = add(total, Slots(cpu=a.capacity.cpu, mem=a.capacity.mem, fgpu=_fgpu_of(a)))
    return total


def _fgpu_of(a: AgentView) -> int:
    return len(a.gpus) * a.fgpu_per_gpu


def held_by_user(s: ClusterState, group: str) -> dict[str, Slots]:
    """What each user's sessions hold on the group's agents."""
    held: dict[str, Slots] = {}
    for a in _agents(s, group):
        for session_id in a.sessions:
            v = s.sessions[session_id]
            who = user_of(v)
            held[who] = add(held.get(who, Slots()), v.slots)
    return held


def dominant_share(held: Slots, capacity: Slots) -> Fraction:
    """The largest of ``held``'s CPU, memory and fGPU as a fraction of ``capacity``'s
    (a resource the group has none of counts for nothing)."""
    shares = [
        Fraction(h, c)
        for h, c in ((held.cpu, capacity.cpu), (held.mem, capacity.mem), (held.fgpu, capacity.fgpu))
        if c > 0
    ]
    return max(shares, default=Fraction(0))


def _drf(s: ClusterState, group: str, queue: list[str]) -> Iterator[str]:
    views = s.sessions
    capacity = group_capacity(s, group)
    held = held_by_user(s, group)
    levels: dict[int, dict[str, deque[str]]] = {}
    for sid in sorted(queue, key=lambda sid: views[sid].arrival_seq):
        v = views[sid]
        levels.setdefault(v.priority, {}).setdefault(user_of(v), deque()).append(sid)

    def entry(user: str, waiting: deque[str]) -> tuple[Fraction, int, str]:
        share = dominant_share(held.get(user, Slots()), capacity)
        return (share, views[waiting[0]].arrival_seq, user)

    for priority in sorted(levels, reverse=True):
        users = levels[priority]
        heap = [entry(user, waiting) for user, waiting in users.items()]
        heapq.heapify(heap)
        while heap:
            _, _, user = heapq.heappop(heap)
            waiting = users[user]
            sid = waiting.popleft()
            yield sid
            v = views[sid]  # the scheduler has placed it, or not, by now
            if v.status in HOLDS_ALLOCATION:
                held[user] = add(held.get(user, Slots()), v.slots)
            if waiting:
                heapq.heappush(heap, entry(user, waiting))
