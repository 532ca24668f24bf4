"""Sessions that come and go on a virtual clock, through the scheduler's fold and decide.

A timed replay is the cluster's own life, sped up to as fast as the scheduler decides:
each session is asked for at its arrival time, admitted at once (as the quota actor
admits it), waits in the scheduler's queue while nothing fits and is placed by the
scheduler's own ``decide`` when something frees; its agent (the dummy runtime) starts it
at once, and it ends after the time it held its share. The clock is virtual: it jumps
from one instant where something happens (an arrival, an end, a withdrawal, a pending
timeout falling due) to the next, so a replay of months takes seconds and gives the same
result every time. Every instant is one of the scheduler's rounds as the log would wake
it: what happened then is folded, then the scheduler decides until it has nothing more
to say, its decisions folded back as the log would bring them.

``Arrival``: one request with its times; ``replay_timed`` runs them and returns a
``Run``; ``Run.summary`` reduces a run to what ``fgpu sim replay --timed`` and ``fgpu
sim whatif`` print: queue waits, the share of the fGPU allocated over time, sessions
rejected and cancelled. ``Run`` is also what ``services.sim.whatif`` makes of what the
log says happened, so both sides are summed up alike.
"""

import bisect
import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any, NamedTuple

import msgspec

from events import (
    AgentRegistered,
    AnyEvent,
    GroupSettings,
    Record,
    SessionAdmitted,
    SessionDestroyRequested,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
)
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.memory_log import MemoryLog
from services.adapters.virtual_clock import VirtualClock
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from services.domain.provenance import Provenance, stamp
from services.domain.status import SessionStatus

__all__ = ["EPOCH", "Arrival", "Held", "Outcome", "Run", "nearest_rank", "replay_timed"]

EPOCH = datetime(2023, 7, 10, tzinfo=UTC)  # a replay's time zero, unless given one
S = SessionStatus


class Arrival(NamedTuple):
    """A request replayed at ``arrival_s`` (seconds from time zero) that holds its share
    for ``duration_s`` once placed; ``withdraw_s``: when its owner gives up on it if it
    still waits then (a destroy while pending), None: it waits as long as it takes."""

    request: SessionRequested
    arrival_s: float
    duration_s: float
    withdraw_s: float | None = None


class Held(NamedTuple):
    """A session already placed at time zero, where ``placed`` put it, holding its share
    until ``until_s``: what a replay starting in the middle of a cluster's life finds."""

    request: SessionRequested
    placed: SessionScheduled
    until_s: float


class Outcome(NamedTuple):
    """What became of one request: placed after ``wait_s`` seconds in the queue, or not
    (``wait_s`` None) and why: its ended status (``rejected``, ``cancelled``), or
    ``waiting`` if it still waited at the end."""

    status: str
    wait_s: float | None


class _Kind(IntEnum):
    """What happens at an instant, in the order it is applied within one instant: what
    ends first frees its share for what arrives at the same time."""

    END = 0
    WITHDRAW = 1
    ARRIVE = 2
    WAKE = 3  # a pending timeout falls due: only a round


@dataclass
class Run:
    """A replay's (or the log's) record: each request's outcome, in the arrivals' order,
    and the fGPU allocated after each instant it changed: ``allocated[i] = (t, fgpu)``
    from ``t`` seconds on, of ``capacity`` quanta."""

    capacity: int
    outcomes: list[Outcome] = field(default_factory=list)
    allocated: list[tuple[float, int]] = field(default_factory=list)

    def summary(self, span_s: float, samples: int = 100) -> dict[str, Any]:
        """Queue waits (p50, p99 and mean of the placed, in seconds), how many requests
        were placed, rejected, cancelled or still waited, and the allocated share of the
        fGPU (percent): its mean over ``[0, span_s]`` and the curve of ``samples + 1``
        points ``[t, percent]`` evenly spread over it."""
        waits = sorted(o.wait_s for o in self.outcomes if o.wait_s is not None)
        counts = {"placed": len(waits)}
        for status in ("rejected", "cancelled", "waiting"):
            counts[status] = sum(o.status == status for o in self.outcomes)
        return {
            "sessions": len(self.outcomes),
            **counts,
            "wait_s": {
                "p50": nearest_rank(waits, 0.50),
                "p99": nearest_rank(waits, 0.99),
                "mean": round(sum(waits) / len(waits), 3) if waits else None,
            },
            "utilisation_pct": {
                "mean": round(self.mean_allocated(span_s) * 100 / self.capacity, 4)
                if self.capacity and span_s > 0
                else 0.0,
                "curve": self.curve(span_s, samples),
            },
        }

    def at(self, t: float) -> int:
        """The fGPU allocated at ``t`` (after what happened at ``t``)."""
        i = bisect.bisect_right(self.allocated, t, key=lambda change: change[0])
        return self.allocated[i - 1][1] if i else 0

    def curve(self, span_s: float, samples: int) -> list[list[float]]:
        if not self.capacity:
            return []
        points = []
        for i in range(samples + 1):
            t = span_s * i / samples
            points.append([round(t, 3), round(self.at(t) * 100 / self.capacity, 4)])
        return points

    def mean_allocated(self, span_s: float) -> float:
        """The fGPU allocated, averaged over time from 0 to ``span_s``."""
        total = 0.0
        steps = [*self.allocated, (math.inf, 0)]
        for (t0, fgpu), (t1, _) in itertools.pairwise(steps):
            lo, hi = max(t0, 0.0), min(t1, span_s)
            if hi > lo:
                total += fgpu * (hi - lo)
        return total / span_s


def nearest_rank(ordered: Sequence[float], q: float) -> float | None:
    """The sample at ``q`` of ``ordered`` (nearest rank: the smallest with at least ``q``
    of the samples at or below it); None if there is none."""
    if not ordered:
        return None
    return round(ordered[max(math.ceil(q * len(ordered)) - 1, 0)], 3)


class _Replay:
    """One replay's state: the fold, the scheduler deciding on it, what is due when."""

    def __init__(
        self,
        agents: Sequence[AgentRegistered],
        arrivals: Sequence[Arrival],
        scheduler: SchedulerActor,
        clock: VirtualClock,
        group: tuple[str, GroupSettings] | None,
        held: Sequence[Held],
    ) -> None:
        self.s = ClusterState()
        if group is not None:
            # Read by a scheduler that takes a group's settings from the tenancy.
            self.s.tenancy.groups[group[0]] = group[1]
        self.seq = 0
        self.clock = clock
        self.scheduler = scheduler
        self.arrivals = arrivals
        self.held = held
        self.index = {a.request.session_id: i for i, a in enumerate(arrivals)}
        self.placed_at: dict[int, float] = {}
        # (t, _Kind, index): of an arrival, or -1 - of a held session
        self.due: list[tuple[float, _Kind, int]] = []
        self.allocated = 0
        self.run = Run(capacity=sum(a.capacity.fgpu for a in agents))
        for a in agents:
            self.fold(subj.agent(a.agent_id), msgspec.structs.replace(a, at=clock.now()))
        for k, h in enumerate(held):
            self.hold(h)
            heapq.heappush(self.due, (h.until_s, _Kind.END, -1 - k))
        if self.allocated:
            self.run.allocated.append((0.0, self.allocated))
        for i, arrival in enumerate(arrivals):
            heapq.heappush(self.due, (arrival.arrival_s, _Kind.ARRIVE, i))
            if arrival.withdraw_s is not None:
                heapq.heappush(self.due, (arrival.withdraw_s, _Kind.WITHDRAW, i))

    def hold(self, h: Held) -> None:
        """``h`` asked for, admitted, placed and started at time zero."""
        r, now = h.request, self.clock.now()
        sid = r.session_id
        self.fold(subj.request(r.owner, sid), msgspec.structs.replace(r, at=now))
        prov = Provenance("quota", now, r.id, r.correlation_id or r.id)
        self.fold(subj.ADMISSION, stamp(SessionAdmitted, prov, session_id=sid, owner=r.owner))
        placed = msgspec.structs.replace(h.placed, at=now)
        self.fold(subj.LEDGER, placed)
        self.fold(*_started(placed, now))
        self.allocated += placed.slots.fgpu

    def fold(self, subject: str, e: AnyEvent) -> None:
        self.seq += 1
        evolve(self.s, Record(seq=self.seq, subject=subject, event=e))

    def go(self) -> Run:
        while self.due:
            t = self.clock.elapsed = self.due[0][0]
            while self.due and self.due[0][0] == t:
                _, kind, i = heapq.heappop(self.due)
                self.happen(kind, i)
            self.round()
            if not self.run.allocated or self.run.allocated[-1][1] != self.allocated:
                self.run.allocated.append((t, self.allocated))
        self.run.outcomes = [self.outcome(i) for i in range(len(self.arrivals))]
        return self.run

    def happen(self, kind: _Kind, i: int) -> None:
        r = self.arrivals[i].request if i >= 0 else self.held[-1 - i].request
        sid = r.session_id
        now = self.clock.now()
        if kind is _Kind.ARRIVE:
            self.fold(subj.request(r.owner, sid), msgspec.structs.replace(r, at=now))
            prov = Provenance("quota", now, r.id, r.correlation_id or r.id)
            self.fold(subj.ADMISSION, stamp(SessionAdmitted, prov, session_id=sid, owner=r.owner))
            timeout = self.scheduler.settings(self.s, self.s.sessions[sid].group).pending_timeout_s
            if timeout is not None and timeout > 0:
                heapq.heappush(self.due, (self.clock.elapsed + timeout, _Kind.WAKE, i))
        elif kind is _Kind.WITHDRAW:
            v = self.s.sessions.get(sid)
            if v is not None and v.status is S.PENDING:
                prov = Provenance(r.owner, now)
                destroy = stamp(SessionDestroyRequested, prov, session_id=sid, requester=r.owner)
                self.fold(subj.request(r.owner, sid), destroy)
        elif kind is _Kind.END:
            v = self.s.sessions[sid]
            agent = v.agent_id or ""
            prov = Provenance(f"agent:{agent}", now, None, v.correlation_id)
            ended = stamp(
                SessionTerminated,
                prov,
                session_id=sid,
                agent_id=agent,
                exit_code=0,
                reason="its time was up (as recorded)",
            )
            self.fold(subj.agent_session(agent, sid), ended)
            self.allocated -= v.slots.fgpu

    def round(self) -> None:
        """The scheduler decides until it has nothing more to say; each placement is
        started at once by its agent, and ends after its duration."""
        while decisions := self.scheduler.decide(self.s):
            for d in decisions:
                self.fold(subj.LEDGER, d)
                if isinstance(d, SessionScheduled):
                    self.started(d)
        self.s.changed.clear()
        self.s.changed_agents.clear()

    def started(self, d: SessionScheduled) -> None:
        i = self.index[d.session_id]
        self.fold(*_started(d, self.clock.now()))
        self.allocated += d.slots.fgpu
        self.placed_at[i] = self.clock.elapsed
        end = self.clock.elapsed + self.arrivals[i].duration_s
        heapq.heappush(self.due, (end, _Kind.END, i))

    def outcome(self, i: int) -> Outcome:
        a = self.arrivals[i]
        if i in self.placed_at:
            return Outcome("placed", self.placed_at[i] - a.arrival_s)
        status = self.s.sessions[a.request.session_id].status
        return Outcome("waiting" if status is S.PENDING else str(status).lower(), None)


def _started(d: SessionScheduled, now: datetime) -> tuple[str, SessionRunning]:
    """What the dummy agent appends for placement ``d``: the session runs at once."""
    prov = Provenance(f"agent:{d.agent_id}", now, d.id, d.correlation_id)
    running = stamp(
        SessionRunning,
        prov,
        session_id=d.session_id,
        agent_id=d.agent_id,
        container_id=f"dummy-{d.session_id}",
    )
    return subj.agent_session(d.agent_id, d.session_id), running


def replay_timed(
    agents: Sequence[AgentRegistered],
    arrivals: Sequence[Arrival],
    policy: str,
    *,
    pending_timeout_s: int | None = None,
    epoch: datetime = EPOCH,
    group: tuple[str, GroupSettings] | None = None,
    held: Sequence[Held] = (),
) -> Run:
    """``arrivals`` replayed on the agents of ``agents`` (registered at time zero, in
    that order), placed by the scheduler with ``policy`` and ``pending_timeout_s`` (None:
    a session waits until it fits), time zero being ``epoch``. ``group``: a resource
    group's name and settings, folded into the replay's tenancy as the administrator
    gave them. ``held``: sessions already placed at time zero (not among the run's
    outcomes; their shares are in its allocation). Session ids must be unique. Raises
    UnknownPolicy."""
    clock = VirtualClock(epoch)
    # Handed each state to decide on: its log is never appended to.
    scheduler = SchedulerActor(
        MemoryLog(), clock, policy=policy, pending_timeout_s=pending_timeout_s
    )
    return _Replay(agents, arrivals, scheduler, clock, group, held).go()
