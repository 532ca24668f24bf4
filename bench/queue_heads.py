"""A sketch, for ``bench/queue_scale.py --heads``: a scheduling round that visits only the
head of each shape's queue, to measure the design ``docs/benchmarks.md`` proposes for
``SchedulerActor.decide``. Not the product's scheduler.

Within one round nothing frees, so once a session of a shape (slots, image, models) fails
to fit, every later one of that shape fails too: the round merges the heads of the
shapes' queues in queue order (a heap keyed as the queue is sorted), places each head it
can, and drops a shape at its first failure. Its cost is the placements made plus one
``place`` and one ``never_fits`` per shape, whatever the queue's length.

It covers what this bench exercises, and refuses the rest: no pending timeout, no
session waiting past the reservation threshold, every queued session already told why it
waits (the product would keep the untold and those whose timeout falls due apart, and
visit them alone). Its index follows ``ClusterState.changed``, as an actor would.
"""

import heapq
from datetime import datetime

from events import AnyEvent, SessionRejected, SessionScheduled
from services.actors.common import Provenance, stamp
from services.actors.scheduler import SchedulerActor, _admitted_at
from services.domain.allocator import never_fits
from services.domain.state import ClusterState, apply_decision

__all__ = ["HeadsScheduler"]

Shape = tuple[object, ...]  # slots, image, models, priority


class HeadsScheduler(SchedulerActor):
    """``decide`` as the sketch above; the same decisions as ``SchedulerActor.decide``
    where the sketch applies (``bench/queue_scale.py --heads`` checks it)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._queues: dict[Shape, dict[str, None]] = {}  # each in arrival order
        self._shape_of: dict[str, Shape] = {}
        self._synced = False

    def _shape(self, s: ClusterState, sid: str) -> Shape:
        v = s.sessions[sid]
        return (v.slots, v.image, v.gpu_models, v.priority)

    def _add(self, s: ClusterState, sid: str) -> None:
        shape = self._shape(s, sid)
        self._queues.setdefault(shape, {})[sid] = None
        self._shape_of[sid] = shape

    def _remove(self, sid: str) -> None:
        shape = self._shape_of.pop(sid)
        queue = self._queues[shape]
        del queue[sid]
        if not queue:
            del self._queues[shape]

    def _sync(self, s: ClusterState) -> None:
        """The index as the queue stands: all of it once, then what changed since."""
        if not self._synced:
            for sid in s.queue:
                self._add(s, sid)
            self._synced = True
            return
        for sid in s.changed:
            queued, indexed = sid in s.queue, sid in self._shape_of
            if queued and not indexed:
                self._add(s, sid)
            elif indexed and not queued:
                self._remove(sid)

    def _check(self, s: ClusterState, sid: str, now: datetime) -> None:
        v = s.sessions[sid]
        if self.pending_timeout_s is not None or v.waiting is None:
            raise NotImplementedError("the sketch covers told sessions, no pending timeout")
        if (now - _admitted_at(v)).total_seconds() > self.reserve_after_s:
            raise NotImplementedError("the sketch covers no reservation")

    def decide(self, s: ClusterState) -> list[AnyEvent]:
        self._sync(s)
        now = self.clock.now()
        out: list[AnyEvent] = []

        def emit(e: AnyEvent) -> None:
            apply_decision(s, e)
            out.append(e)

        for request in list(s.destroys.values()):
            emit(self._answer_destroy(s, request))
        heads = []
        for shape, queue in self._queues.items():
            sid = next(iter(queue))
            heads.append(((-s.sessions[sid].priority, s.sessions[sid].arrival_seq), shape))
        heapq.heapify(heads)
        unheard = self._unheard(s)
        while heads:
            _, shape = heapq.heappop(heads)
            queue = self._queues[shape]
            sid = next(iter(queue))
            v = s.sessions[sid]
            prov = Provenance("scheduler", now, v.request_id, v.correlation_id)
            why = never_fits(s, v.slots, v.image, gpu_models=v.gpu_models)
            if why is not None:
                for other in list(queue):
                    w = s.sessions[other]
                    e = stamp(
                        SessionRejected,
                        prov,
                        session_id=other,
                        owner=w.owner,
                        code=why.code,
                        reason=why.reason,
                    )
                    emit(e)
                    self._remove(other)
                continue
            placement = self.place(s, v.slots, v.image, unheard, v.gpu_models)
            if placement is None:
                self._check(s, sid, now)
                continue  # the rest of the shape cannot fit either, this round
            agent_id, devices = placement
            emit(
                stamp(
                    SessionScheduled,
                    prov,
                    session_id=sid,
                    owner=v.owner,
                    agent_id=agent_id,
                    slots=v.slots,
                    devices=devices,
                )
            )
            self._remove(sid)
            if shape in self._queues:
                nxt = next(iter(self._queues[shape]))
                key = (-s.sessions[nxt].priority, s.sessions[nxt].arrival_seq)
                heapq.heappush(heads, (key, shape))
        return out
