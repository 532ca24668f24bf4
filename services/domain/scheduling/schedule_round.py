"""One group's part of a scheduling round: what to place, reject, cancel and tell.

Pure: decisions are handed to ``emit``, which applies each to the state at once (two
placements of one round must not take the same share). Nothing frees within a round, so
once a session of some shape does not fit, no later one of that shape can: FIFO and LIFO
rounds look only at the head of each shape's queue (``PendingQueue.shapes``), merged in
queue order, and drop a shape at its first failure; a round costs the shapes and the
placements, not the length of the queue. DRF's order changes with every placement: a
DRF round takes, priority first, the user whose dominant share is least
(``queue_order``), and from it the earliest head of its shapes not failed yet; a user
none of whose shapes is left drops out. It too costs the users, shapes and placements.

A session that waited past ``reserve_after_s`` and does not fit reserves: nothing after it
is placed until it fits (no starvation behind smaller sessions; Backend.AI #13706). The
rest of the round still rejects what can never fit. After the placing, sessions not yet
told why they wait are told (or cancelled, when past the pending timeout), and those
waiting past the pending timeout are cancelled. Each is an event with its reason: the
resource that is short and where (``services.domain.scheduling.waiting``).
"""

import heapq
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from events import (
    AnyEvent,
    GroupSettings,
    QueueOrder,
    SessionCancelled,
    SessionQueued,
    SessionRejected,
    SessionScheduled,
    Slots,
)
from services.domain.durations import before
from services.domain.fold.cluster import ClusterState
from services.domain.fold.pending import QueueShape, UserKey, admitted_at
from services.domain.provenance import Provenance, stamp
from services.domain.records import SessionView
from services.domain.resources import add
from services.domain.scheduling.allocator import Placement, Refusal, never_fits
from services.domain.scheduling.images import pullers
from services.domain.scheduling.placement import PlacementPolicy
from services.domain.scheduling.queue_order import dominant_share, group_capacity, held_by_user
from services.domain.scheduling.waiting import WaitingNotes
from services.domain.tenancy.vfolders import mounts_all

__all__ = [
    "NAME",
    "GroupRound",
    "admitted_at",
    "cancel_pending",
    "not_mounting",
    "overdue",
]

NAME = "scheduler"  # the actor whose decisions these are


@dataclass
class GroupRound:
    """One group's part of a round. ``excluded``: agents of other groups and those not
    heard from yet; ``budget``: how many decisions the round may still make in all (the
    server's largest atomic batch), shared through ``out``."""

    s: ClusterState
    group: str
    settings: GroupSettings
    place: PlacementPolicy
    excluded: AbstractSet[str]
    now: datetime
    emit: Callable[[AnyEvent], None]
    out: list[AnyEvent]
    budget: int
    reserve_after_s: float
    _never: dict[QueueShape, Refusal | None] = field(default_factory=dict)
    _pulling: dict[str, frozenset[str]] = field(default_factory=dict)
    # Per set of storage hosts: the group's agents that do not mount them all.
    _unmounting: dict[tuple[str, ...], frozenset[str]] = field(default_factory=dict)
    _notes: WaitingNotes | None = None  # why sessions wait, once asked
    # The session that reserves: nothing more is placed this round.
    _reserved_by: str | None = None

    def run(self) -> None:
        if self.settings.queue is QueueOrder.DRF:
            self._place_fairly()
        else:
            self._place_heads(lifo=self.settings.queue is QueueOrder.LIFO)
        if self._full():
            return  # the next round carries on where this one stopped
        self._tell_untold()
        self._time_out()

    def _full(self) -> bool:
        return len(self.out) >= self.budget

    def _prov(self, v: SessionView) -> Provenance:
        return Provenance(NAME, self.now, v.request_id, v.correlation_id)

    # ---- placing -------------------------------------------------------------------------

    def _place_heads(self, *, lifo: bool) -> None:
        s = self.s
        shapes = s.queue.shapes(self.group)
        heads = [(_head_key(key, queue, lifo), key) for key, queue in shapes.items()]
        heapq.heapify(heads)
        while heads and not self._full():
            _, key = heapq.heappop(heads)
            queue = shapes.get(key)
            if not queue:
                continue
            v = s.sessions[_head(queue, lifo)]
            why = self._never_fits(key, v)
            if why is not None:
                self._reject_all(list(queue), why)
                continue
            placement = None if self._reserved_by else self._placement(v)
            if placement is None:
                # The rest of its shape cannot fit either, this round; the one of them
                # that waited longest (the first to arrive) may reserve.
                if not self._reserved_by:
                    self._reserved_by = self._reserves(s.sessions[next(iter(queue))])
                continue
            self._scheduled(v, placement)
            queue = shapes.get(key)
            if queue:
                heapq.heappush(heads, (_head_key(key, queue, lifo), key))

    def _place_fairly(self) -> None:
        s = self.s
        users = s.queue.of_users(self.group)  # live: each placement leaves it at once
        capacity = group_capacity(s, self.group)
        held = held_by_user(s, self.group)
        failed: set[QueueShape] = set()

        def entry(who: UserKey) -> tuple[Fraction, int, str] | None:
            """``who``'s place in the heap, by its share, then its earliest head left."""
            heads = [
                next(iter(q.values())) for k, q in users.get(who, {}).items() if k not in failed
            ]
            if not heads:
                return None
            return (dominant_share(held.get(who[1], Slots()), capacity), min(heads), who[1])

        levels: dict[int, list[str]] = {}
        for priority, user in users:
            levels.setdefault(priority, []).append(user)
        for priority in sorted(levels, reverse=True):
            heap = [e for e in (entry((priority, u)) for u in levels[priority]) if e is not None]
            heapq.heapify(heap)
            while heap and not self._full():
                popped = heapq.heappop(heap)
                who = (priority, popped[2])
                now = entry(who)
                if now != popped:
                    # Another user's failure failed this one's earliest shape too: its
                    # place is later now (a share changes only when its own is placed).
                    if now is not None:
                        heapq.heappush(heap, now)
                    continue
                self._place_head(who, users[who], failed, held)
                again = entry(who)
                if again is not None:
                    heapq.heappush(heap, again)

    def _place_head(
        self,
        who: UserKey,
        shapes: dict[QueueShape, dict[str, int]],
        failed: set[QueueShape],
        held: dict[str, Slots],
    ) -> None:
        """The earliest of ``who``'s sessions of a shape not ``failed``: placed (``held``
        counts it), else its shape fails, or its shape's sessions are rejected."""
        key, queue = min(
            ((k, q) for k, q in shapes.items() if k not in failed),
            key=lambda item: next(iter(item[1].values())),
        )
        v = self.s.sessions[next(iter(queue))]
        why = self._never_fits(key, v)
        if why is not None:
            self._reject_all(list(queue), why)
            return
        placement = None if self._reserved_by else self._placement(v)
        if placement is None:
            failed.add(key)
            if not self._reserved_by:  # the shape's longest waiting, whoever's it is
                first = next(iter(self.s.queue.shapes(self.group)[key]))
                self._reserved_by = self._reserves(self.s.sessions[first])
            return
        self._scheduled(v, placement)
        held[who[1]] = add(held.get(who[1], Slots()), v.slots)

    def _never_fits(self, key: QueueShape, v: SessionView) -> Refusal | None:
        """Once per shape and round: it scans every agent."""
        if key not in self._never:
            why = never_fits(self.s, v.slots, v.image, gpu_models=v.gpu_models, group=self.group)
            if why is None and v.storage_hosts:
                why = self._never_mounted(v)
            self._never[key] = why
        return self._never[key]

    def _never_mounted(self, v: SessionView, *, live_only: bool = False) -> Refusal | None:
        """Why no agent of the group that mounts ``v``'s folders' storage hosts (a live
        one, if ``live_only``) could ever take all of ``v``; None if one could."""
        cannot = self._not_mounting(v.storage_hosts)
        named = f"the virtual folders of storage host {', '.join(v.storage_hosts)}"
        if not any(
            a.group == self.group and a.agent_id not in cannot and not (live_only and a.lost)
            for a in self.s.agents.values()
        ):
            return Refusal("vfolder", f"no agent of resource group {self.group} mounts {named}")
        why = never_fits(
            self.s,
            v.slots,
            v.image,
            live_only=live_only,
            gpu_models=v.gpu_models,
            group=self.group,
            excluded=cannot,
        )
        return (
            None
            if why is None
            else Refusal(why.code, f"of the agents that mount {named}: {why.reason}")
        )

    def _placement(self, v: SessionView) -> Placement | None:
        """Among the agents holding its image first; those that would pull it after. Only
        agents that mount its folders' storage hosts."""
        image = v.image
        if image not in self._pulling:  # once per image and round: it scans every agent
            self._pulling[image] = pullers(self.s, image)
        pulling = self._pulling[image]
        excluded = self.excluded
        if v.storage_hosts:
            excluded = excluded | self._not_mounting(v.storage_hosts)
        if pulling:
            held = self.place(self.s, v.slots, image, excluded | pulling, v.gpu_models)
            if held is not None:
                return held
        return self.place(self.s, v.slots, image, excluded, v.gpu_models)

    def _not_mounting(self, hosts: tuple[str, ...]) -> frozenset[str]:
        """Once per set of hosts and round: it scans every agent."""
        if hosts not in self._unmounting:
            self._unmounting[hosts] = not_mounting(self.s, hosts)
        return self._unmounting[hosts]

    def _reserves(self, v: SessionView) -> str | None:
        """``v``'s id if ``v``, which does not fit, waited so long that nothing after it
        may be placed until it fits (no starvation behind smaller sessions; Backend.AI
        #13706), else None. Only a live agent it could run on (mounting its folders) is
        worth waiting for."""
        if (self.now - admitted_at(v)).total_seconds() <= self.reserve_after_s:
            return None
        fits_a_live_one = (
            never_fits(
                self.s, v.slots, v.image, live_only=True, gpu_models=v.gpu_models, group=self.group
            )
            is None
        )
        if not fits_a_live_one:
            return None
        if v.storage_hosts and self._never_mounted(v, live_only=True) is not None:
            return None
        return v.session_id

    def _scheduled(self, v: SessionView, placement: Placement) -> None:
        agent_id, devices = placement
        self.emit(
            stamp(
                SessionScheduled,
                self._prov(v),
                session_id=v.session_id,
                owner=v.owner,
                agent_id=agent_id,
                slots=v.slots,
                devices=devices,
            )
        )

    def _reject_all(self, session_ids: Iterable[str], why: Refusal) -> None:
        for session_id in session_ids:
            if self._full():
                return
            v = self.s.sessions[session_id]
            e = stamp(
                SessionRejected,
                self._prov(v),
                session_id=session_id,
                owner=v.owner,
                code=why.code,
                reason=why.reason,
            )
            self.emit(e)

    # ---- telling and timing out ------------------------------------------------------------

    def _waiting(self) -> WaitingNotes:
        if self._notes is None:
            self._notes = WaitingNotes(self.s, self.group, self.excluded, self._not_mounting)
        return self._notes

    def _tell_untold(self) -> None:
        """Each session still waiting that was never told why: told, or cancelled when it
        waited past its group's pending timeout (0: the first time it does not fit)."""
        limit = self.settings.pending_timeout_s
        for session_id in list(self.s.queue.untold(self.group)):
            if self._full():
                return
            v = self.s.sessions[session_id]
            if limit is not None and (self.now - admitted_at(v)).total_seconds() >= limit:
                notes = self._waiting()
                self.emit(cancel_pending(v, limit, notes, self._prov(v), self._reserved_by))
            else:
                reason = self._waiting().note(v, self._reserved_by)
                self.emit(stamp(SessionQueued, self._prov(v), session_id=session_id, reason=reason))

    def _time_out(self) -> None:
        """Sessions waiting past the group's pending timeout, cancelled."""
        limit = self.settings.pending_timeout_s
        if limit is None:
            return
        for e in overdue(self.s, self.group, limit, self.now, self.excluded):
            if self._full():
                return
            self.emit(e)


def overdue(
    s: ClusterState, group: str, limit: int, now: datetime, excluded: AbstractSet[str]
) -> Iterator[AnyEvent]:
    """The cancellations of ``group``'s sessions waiting past ``limit`` s at ``now``, the
    longest waiting first (``excluded``: the agents not the group's, for the reason)."""
    due = s.queue.admitted_by(group, before(now, limit))
    if not due:
        return
    unmounting: dict[tuple[str, ...], frozenset[str]] = {}

    def unmounting_of(hosts: tuple[str, ...]) -> frozenset[str]:
        if hosts not in unmounting:
            unmounting[hosts] = not_mounting(s, hosts)
        return unmounting[hosts]

    notes = WaitingNotes(s, group, excluded, unmounting_of)
    for session_id in due:
        v = s.sessions[session_id]
        prov = Provenance(NAME, now, v.request_id, v.correlation_id)
        yield cancel_pending(v, limit, notes, prov)


def cancel_pending(
    v: SessionView,
    limit: int,
    notes: WaitingNotes,
    prov: Provenance,
    reserved_by: str | None = None,
) -> AnyEvent:
    """``v`` cancelled: it waited past its pending timeout of ``limit`` s; the reason says
    what it waits for (``notes``; ``reserved_by``: the session reserving the group)."""
    waiting = notes.note(v, reserved_by)
    if notes.fits(v):  # it fits, but waited behind a session that reserves the group
        reason = f"not placed within the pending timeout of {limit} s ({waiting})"
    else:
        reason = f"nothing fits within the pending timeout of {limit} s ({waiting})"
    return stamp(SessionCancelled, prov, session_id=v.session_id, owner=v.owner, reason=reason)


def not_mounting(s: ClusterState, hosts: tuple[str, ...]) -> frozenset[str]:
    """The agents that do not mount the folders of every storage host in ``hosts``."""
    return frozenset(a.agent_id for a in s.agents.values() if not mounts_all(a, hosts))


def _head(queue: dict[str, int], lifo: bool) -> str:
    return next(reversed(queue)) if lifo else next(iter(queue))


def _head_key(key: QueueShape, queue: dict[str, int], lifo: bool) -> tuple[int, int]:
    arrival = queue[_head(queue, lifo)]
    return (-key[0], -arrival if lifo else arrival)
