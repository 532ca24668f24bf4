"""What would have happened: a resource group's own requests, read from the log, replayed
under another placement policy, beside what did happen.

``read_group`` folds the whole log (as every actor folds it) and keeps, of resource group
G, the agents registered in it and the sessions asked for in it within the time range
that were admitted (a request refused at admission is counted, not replayed: its quota
refusal does not depend on the policy). Of each it keeps what happened (when it was
admitted, placed, ended, how) and makes an ``Arrival`` of it for ``services.sim.timed``:

- it arrives when it was admitted (a wait is counted from admission on both sides);
- it holds its share, once placed, as long as it held it: from its placement to its end
  (still holding at the end of the range: until then). One never placed holds it, if
  placed, for the lifetime it asked for, else until the end of the range;
- its owner gives up on it when the owner asked to destroy it, if it still waits then.

``whatif`` replays them with the policy asked for, the group's pending timeout and
settings as the log has them (the default group without settings: no pending timeout),
and sums up both sides alike (``Run.summary``): waits, placed, rejected, cancelled, the
group's fGPU allocated over the range. Sessions of the group placed before the range and
still holding their share at its start are on both sides where they were, until they
ended (``Held``): the replay moves none of them. (Those asked for before the range and
still waiting at its start are on neither.)

It only reads: nothing is appended, no durable cursor is made. Who may run it is whoever
may read the whole log (``fgpu sim whatif`` says who).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from events import (
    AgentRegistered,
    GroupSettings,
    SessionDestroyRequested,
    SessionRequested,
    SessionScheduled,
)
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from services.domain.records import SessionView
from services.domain.status import ENDED, SessionStatus
from services.domain.tenancy.groups import DEFAULT_GROUP
from services.ports import EventLog, HistoryMissing
from services.sim.timed import Arrival, Held, Outcome, Run, replay_timed

__all__ = ["Recorded", "read_group", "whatif"]

S = SessionStatus


@dataclass
class Recorded:
    """What the log holds of one group in a time range: its agents (latest registration
    of each, in order of registration), its admitted sessions as arrivals (times in
    seconds from ``epoch``) and what happened to them, those placed before and holding
    their share at the start, the requests refused at
    admission, the group's settings (None: it has none) and the range's length."""

    group: str
    agents: list[AgentRegistered]
    arrivals: list[Arrival]
    held: list[Held]
    happened: Run
    refused: int
    settings: GroupSettings | None
    epoch: datetime
    span_s: float


def _seconds(at: datetime, epoch: datetime) -> float:
    return (at - epoch).total_seconds()


def _first(v: SessionView, statuses: Iterable[SessionStatus]) -> datetime | None:
    wanted = frozenset(statuses)
    return next((t.at for t in v.history if t.status in wanted), None)


class _Reader:
    """What one pass over the log keeps of one group."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.s = ClusterState()
        self.requests: dict[str, SessionRequested] = {}
        self.agents: dict[str, AgentRegistered] = {}
        self.destroyed: dict[str, datetime] = {}  # session id -> its first destroy request
        self.placed: dict[str, SessionScheduled] = {}  # session id -> its first placement
        self.last_at: datetime | None = None  # the latest time an event says

    def take(self, e: object) -> None:
        if isinstance(e, SessionRequested) and (e.group or DEFAULT_GROUP) == self.group:
            self.requests.setdefault(e.session_id, e)
        elif isinstance(e, AgentRegistered):
            self.agents.pop(e.agent_id, None)  # a later registration replaces it
            if e.group == self.group:
                self.agents[e.agent_id] = e
        elif isinstance(e, SessionDestroyRequested) and e.session_id in self.requests:
            self.destroyed.setdefault(e.session_id, e.at)
        elif isinstance(e, SessionScheduled) and e.session_id in self.requests:
            self.placed.setdefault(e.session_id, e)


async def read_group(
    events: EventLog, group: str, since: datetime | None, until: datetime | None
) -> Recorded:
    """Group ``group``'s agents and the sessions asked for in it from ``since`` (None:
    its first) to ``until`` (None: the log's last event), read from ``events``, which is
    only read (an ``ArchivedLog`` for a stream whose past was archived). Raises LogError;
    HistoryMissing if part of the log's past is in neither: what-if on part of the history
    would be told as if it were all of it."""
    reader = _Reader(group)
    async for batch in events.read(0):
        for record in batch:
            evolve(reader.s, record)
            reader.take(record.event)
            at = getattr(record.event, "at", None)
            if at is not None and (reader.last_at is None or at > reader.last_at):
                reader.last_at = at
    s = reader.s
    if s.folded < s.last_seq:
        raise HistoryMissing(
            f"{s.last_seq - s.folded} records of the log up to {s.last_seq} were archived "
            "out of the stream and are not in the archive read with it"
        )
    asked = [
        r
        for r in reader.requests.values()
        if (since is None or r.at >= since) and (until is None or r.at < until)
    ]
    admitted = {r.session_id: _first(s.sessions[r.session_id], (S.PENDING,)) for r in asked}
    kept = sorted(
        (r for r in asked if admitted[r.session_id] is not None),
        key=lambda r: (admitted[r.session_id], s.sessions[r.session_id].arrival_seq),
    )
    first = min((a for a in admitted.values() if a is not None), default=None)
    epoch = since or first or reader.last_at or datetime.now().astimezone()
    end = until or reader.last_at or epoch
    span = max(_seconds(end, epoch), 0.0)
    happened = Run(capacity=sum(a.capacity.fgpu for a in reader.agents.values()))
    arrivals = []
    steps: dict[float, int] = {}  # the fGPU allocation's changes, by when
    for r in kept:
        v = s.sessions[r.session_id]
        came = _seconds(admitted[r.session_id] or epoch, epoch)
        placed = _first(v, (S.SCHEDULED,))
        ended = _first(v, ENDED)
        if placed is None:
            held = float(r.lifetime_s) if r.lifetime_s is not None else max(span - came, 0.0)
            status = "waiting" if v.status is S.PENDING else str(v.status).lower()
            happened.outcomes.append(Outcome(status, None))
        else:
            start, stop = _seconds(placed, epoch), _seconds(ended or end, epoch)
            held = max(stop - start, 0.0)
            happened.outcomes.append(Outcome("placed", start - came))
            steps[start] = steps.get(start, 0) + r.slots.fgpu
            steps[stop] = steps.get(stop, 0) - r.slots.fgpu
        gave_up = reader.destroyed.get(r.session_id)
        withdraw = None if gave_up is None else _seconds(gave_up, epoch)
        arrivals.append(Arrival(r, came, held, withdraw))
    carried = _held_at_start(reader, epoch, end) if since is not None else []
    for h in carried:
        steps[0.0] = steps.get(0.0, 0) + h.placed.slots.fgpu
        steps[h.until_s] = steps.get(h.until_s, 0) - h.placed.slots.fgpu
    held_now = 0
    for t in sorted(steps):
        held_now += steps[t]
        if not happened.allocated or happened.allocated[-1][1] != held_now:
            happened.allocated.append((t, held_now))
    return Recorded(
        group=group,
        agents=list(reader.agents.values()),
        arrivals=arrivals,
        held=carried,
        happened=happened,
        refused=len(asked) - len(kept),
        settings=s.tenancy.groups.get(group),
        epoch=epoch,
        span_s=span,
    )


def _held_at_start(reader: _Reader, epoch: datetime, end: datetime) -> list[Held]:
    """The group's sessions placed (on one of its agents) before ``epoch`` and still
    holding their share then, each until it ended (or ``end``)."""
    out = []
    for sid, placed in reader.placed.items():
        v = reader.s.sessions[sid]
        ended = _first(v, ENDED)
        if placed.at > epoch or (ended is not None and ended <= epoch):
            continue
        if placed.agent_id in reader.agents:
            until = _seconds(ended or end, epoch)
            out.append(Held(reader.requests[sid], placed, until))
    return out


def whatif(recorded: Recorded, policy: str, samples: int = 100) -> dict[str, Any]:
    """What happened to ``recorded``'s sessions and what would have under ``policy``, as
    ``fgpu sim whatif --json`` prints it. Raises UnknownPolicy."""
    settings = recorded.settings
    timeout = None if settings is None else settings.pending_timeout_s
    group = None
    if settings is not None:
        group = (recorded.group, msgspec.structs.replace(settings, policy=policy))
    would = replay_timed(
        recorded.agents,
        recorded.arrivals,
        policy,
        pending_timeout_s=timeout,
        epoch=recorded.epoch,
        group=group,
        held=recorded.held,
    )
    span = recorded.span_s
    return {
        "group": recorded.group,
        "policy": policy,
        "group_policy": None if settings is None else settings.policy,
        "since": recorded.epoch.isoformat(),
        "span_s": round(span, 3),
        "agents": len(recorded.agents),
        "fgpu": recorded.happened.capacity,
        "refused_at_admission": recorded.refused,
        "held_at_start": len(recorded.held),
        "happened": recorded.happened.summary(span, samples),
        "would_have": would.summary(span, samples),
    }
