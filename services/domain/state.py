"""The cluster as a pure fold of the log: ``evolve(state, record) -> state``.

Every actor and every read folds the same records with this one function, so they all
agree on what happened. The fold is deterministic (no clock, no I/O, no randomness) and
total: an event that does not fit the session's current status (a duplicate, a late
report, a decision that lost a race) changes nothing, which is what makes every actor
idempotent under redelivery.

For speed the state is mutated in place and returned; treat it as owned by the fold.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from events import (
    AgentLost,
    AgentRegistered,
    AnyEvent,
    DestroyRejected,
    DevicePlacement,
    Event,
    GpuInfo,
    GpuOomRefused,
    GpuUsageSampled,
    PayloadRejected,
    PolicySet,
    SessionAdmitted,
    SessionCancelled,
    SessionDestroyRequested,
    SessionErrored,
    SessionPreparing,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    Slots,
)
from events import subjects as subj
from services.domain.fit_index import FitIndex
from services.domain.resources import add, sub
from services.domain.status import ENDED, HOLDS_ALLOCATION, SessionStatus
from services.domain.validation import invalid_request
from services.ports import Malformed, Record

__all__ = [
    "AgentView",
    "ClusterState",
    "GpuView",
    "OwnerUsage",
    "SessionView",
    "Transition",
    "apply_decision",
    "evolve",
    "fold",
]

S = SessionStatus


class Transition(msgspec.Struct, frozen=True, gc=False):
    """A session reached ``status`` through event ``event_id`` at sequence ``seq``.

    Immutable values only, so the garbage collector need not track it (gc=False); a
    session keeps one per status it went through. Encoded like the dataclass it was.
    """

    status: SessionStatus
    at: datetime
    seq: int
    event_id: str


@dataclass(slots=True)
class SessionView:
    session_id: str
    owner: str
    image: str
    command: tuple[str, ...]
    slots: Slots
    priority: int
    name: str | None
    request_id: str
    correlation_id: str
    arrival_seq: int
    requested_at: datetime
    status: SessionStatus = S.REQUESTED
    agent_id: str | None = None
    devices: tuple[DevicePlacement, ...] = ()
    container_id: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    quota_held: bool = False
    invalid: str | None = None  # why the request can never be accepted as written
    waiting: str | None = None  # why the scheduler could not place it yet
    history: list[Transition] = field(default_factory=list)


class _Shares:
    """A device's shares and what they leave free, kept out of GpuView's fields.

    A slot of a base class is not a dataclass field, so encoding a GpuView (the
    projections' snapshots) stays as it was; ``__post_init__`` sets ``free`` on every path
    that builds one, decoding included (msgspec calls it). A plain attribute rather than
    a property because the fit index and the allocator read it for every device they
    consider.
    """

    __slots__ = ("free",)
    free: int  # capacity minus the sum of shares
    capacity: int  # GpuView's fields
    shares: dict[str, int]

    def __post_init__(self) -> None:
        self.free = self.capacity - sum(self.shares.values())

    def give(self, session_id: str, quanta: int) -> None:
        self.shares[session_id] = self.shares.get(session_id, 0) + quanta
        self.free -= quanta

    def take_back(self, session_id: str) -> None:
        self.free += self.shares.pop(session_id, 0)


@dataclass(slots=True)
class GpuView(_Shares):
    """One device of an agent.

    Change ``shares`` only through ``give`` and ``take_back``, and never ``capacity``:
    ``free`` follows from both.
    """

    info: GpuInfo
    capacity: int  # fGPU quanta this device is worth
    shares: dict[str, int] = field(default_factory=dict)  # session id -> quanta

    @property
    def allocated(self) -> int:
        """The sum of ``shares``."""
        return self.capacity - self.free


@dataclass(slots=True)
class AgentView:
    agent_id: str
    capacity: Slots
    fgpu_per_gpu: int
    gpus: dict[int, GpuView]
    images: frozenset[str]
    runtime: str
    allocated: Slots = Slots()
    sessions: dict[str, None] = field(default_factory=dict)  # sessions holding an allocation
    lost: bool = False

    @property
    def free(self) -> Slots:
        return sub(self.capacity, self.allocated)


@dataclass(slots=True)
class OwnerUsage:
    sessions: int = 0
    slots: Slots = Slots()


@dataclass(slots=True)
class ClusterState:
    last_seq: int = 0
    sessions: dict[str, SessionView] = field(default_factory=dict)
    agents: dict[str, AgentView] = field(default_factory=dict)
    policies: dict[str, PolicySet] = field(default_factory=dict)
    usage: dict[str, OwnerUsage] = field(default_factory=dict)  # quota held per owner
    subject_seq: dict[str, int] = field(default_factory=dict)  # last sequence per subject
    # Work waiting for an actor, kept by the fold so no actor scans every session:
    undecided: dict[str, None] = field(default_factory=dict)  # REQUESTED, for quota
    queue: dict[str, None] = field(default_factory=dict)  # PENDING, for the scheduler
    destroys: dict[str, SessionDestroyRequested] = field(default_factory=dict)  # unanswered
    # destroy request id -> None if carried out, else why it was refused
    destroy_answers: dict[str, str | None] = field(default_factory=dict)
    malformed: dict[int, tuple[str, str]] = field(default_factory=dict)  # seq -> subject, error
    fit: FitIndex = field(default_factory=FitIndex)
    # Sessions and agents whose state changed since the owner last cleared these; lets an
    # actor look at what a batch changed instead of everything it knows.
    changed: dict[str, None] = field(default_factory=dict)
    changed_agents: dict[str, None] = field(default_factory=dict)


def fold(records: list[Record], state: ClusterState | None = None) -> ClusterState:
    """The state after ``records``, starting from ``state`` (default: empty)."""
    s = ClusterState() if state is None else state
    for r in records:
        evolve(s, r)
    return s


def evolve(s: ClusterState, r: Record) -> ClusterState:
    """Apply one record. Records at or below ``s.last_seq`` were applied already: no-op."""
    seq = r.seq
    if seq <= s.last_seq:
        return s
    s.last_seq = seq
    subject = r.subject
    # Never backwards: an actor may already know a later sequence of a subject it wrote.
    subject_seq = s.subject_seq
    if seq > subject_seq.get(subject, 0):
        subject_seq[subject] = seq
    e = r.event
    if isinstance(e, Malformed):
        s.malformed[seq] = (subject, e.error)
        return s
    own = _SUBJECT_OF[type(e)](e)
    if subject != own and not (subject == subj.LEDGER and type(e) is SessionRejected):
        s.malformed[seq] = (subject, _mismatch(subject, e, own))
        return s
    _apply(s, seq, e)
    return s


def apply_decision(s: ClusterState, e: AnyEvent) -> ClusterState:
    """Apply an event this process is about to append, before the log has it.

    Lets an actor account for its own decisions within one round (two placements must not
    take the same share). When the event comes back from the log the fold's status guards
    make it a no-op. If the append fails, the caller must rebuild the state from the log.
    """
    _apply(s, 0, e)
    return s


def _mismatch(subject: str, e: AnyEvent, own: str) -> str:
    """Why ``e`` may not stand on ``subject``; ``own`` is its subject.

    Every event has its own subject (docs/events.md), and only there does it count. A
    user's NATS permissions confine them to ``fgpu.req.<their key>.>``; checking each
    event against its subject makes that confinement mean something for every reader of
    the log: a user cannot write a decision, nor a request in another key's name.
    """
    tag = e.__struct_config__.tag
    return f"{tag} may not stand on subject {subject} (its subject is {own})"


_E = TypeVar("_E", bound=Event)


def _rule(t: type[_E], subject_of: Callable[[_E], str]) -> tuple[type[Event], Callable[[Any], str]]:
    """A row of ``_SUBJECT_OF``, typed so that mypy checks ``subject_of`` against ``t``."""
    return t, subject_of


def _ledger(e: Event) -> str:
    return subj.LEDGER


def _agent_session(
    e: SessionPreparing | SessionRunning | SessionTerminated | SessionErrored,
) -> str:
    return subj.agent_session(e.agent_id, e.session_id)


def _usage(e: GpuUsageSampled | GpuOomRefused) -> str:
    return subj.usage(e.agent_id, e.session_id)


# Each event type's own subject, looked up by exact type. A rejection may stand on the
# ledger as well: quota rejects on the owner's account, the scheduler (never fits) on the
# ledger; the mismatch message names the first.
_SUBJECT_OF: dict[type[Event], Callable[[Any], str]] = dict(
    [
        _rule(SessionRequested, lambda e: subj.request(e.owner, e.session_id)),
        _rule(SessionDestroyRequested, lambda e: subj.request(e.requester, e.session_id)),
        _rule(SessionAdmitted, lambda e: subj.quota(e.owner)),
        _rule(PolicySet, lambda e: subj.quota(e.owner)),
        _rule(SessionRejected, lambda e: subj.quota(e.owner)),
        _rule(SessionScheduled, _ledger),
        _rule(SessionQueued, _ledger),
        _rule(SessionCancelled, _ledger),
        _rule(SessionTerminating, _ledger),
        _rule(DestroyRejected, _ledger),
        _rule(AgentLost, _ledger),
        _rule(SessionPreparing, _agent_session),
        _rule(SessionRunning, _agent_session),
        _rule(SessionTerminated, _agent_session),
        _rule(SessionErrored, _agent_session),
        _rule(AgentRegistered, lambda e: subj.agent(e.agent_id)),
        _rule(PayloadRejected, lambda e: subj.SYS),
        _rule(GpuUsageSampled, _usage),
        _rule(GpuOomRefused, _usage),
    ]
)


def _transition(
    s: ClusterState, v: SessionView, status: SessionStatus, seq: int, e: AnyEvent
) -> None:
    v.status = status
    v.history.append(Transition(status, e.at, seq, e.id))
    s.changed[v.session_id] = None


def _apply(s: ClusterState, seq: int, e: AnyEvent) -> None:
    _HANDLERS.get(type(e), _nothing)(s, seq, e)
    # A destroy request is answered by the first event that names it as its cause, even
    # one that changed nothing (a stop order that lost the race to the session's end).
    cause = e.causation_id
    if cause is not None and s.destroys.pop(cause, None) is not None:
        s.destroy_answers[cause] = e.reason if isinstance(e, DestroyRejected) else None


# What each event does to the state, one handler per type (dispatched on the exact type).
# Each checks that the event fits the session's current status and otherwise does nothing.


def _requested(s: ClusterState, seq: int, e: SessionRequested) -> None:
    if e.session_id in s.sessions:
        return  # a second request for a taken id changes nothing
    v = SessionView(
        session_id=e.session_id,
        owner=e.owner,
        image=e.image,
        command=e.command,
        slots=e.slots,
        priority=e.priority,
        name=e.name,
        request_id=e.id,
        correlation_id=e.correlation_id or e.id,
        arrival_seq=seq,
        requested_at=e.at,
        invalid=invalid_request(e),
    )
    v.history.append(Transition(S.REQUESTED, e.at, seq, e.id))
    s.sessions[e.session_id] = v
    s.changed[e.session_id] = None
    s.undecided[e.session_id] = None


def _admitted(s: ClusterState, seq: int, e: SessionAdmitted) -> None:
    v = s.sessions.get(e.session_id)
    if v is None or v.status is not S.REQUESTED:
        return
    _transition(s, v, S.PENDING, seq, e)
    s.undecided.pop(v.session_id, None)
    s.queue[v.session_id] = None
    _hold_quota(s, v)


def _rejected(s: ClusterState, seq: int, e: SessionRejected) -> None:
    _withdraw(s, seq, e, S.REJECTED)


def _cancelled(s: ClusterState, seq: int, e: SessionCancelled) -> None:
    _withdraw(s, seq, e, S.CANCELLED)


def _withdraw(
    s: ClusterState, seq: int, e: SessionRejected | SessionCancelled, status: SessionStatus
) -> None:
    """End a session that was never placed."""
    v = s.sessions.get(e.session_id)
    if v is None or v.status not in (S.REQUESTED, S.PENDING):
        return
    v.reason = e.reason
    _release_quota(s, v)
    _end(s, v, status, seq, e)


def _queued(s: ClusterState, seq: int, e: SessionQueued) -> None:
    v = s.sessions.get(e.session_id)
    if v is None or v.status is not S.PENDING or v.waiting is not None:
        return
    v.waiting = e.reason


def _scheduled(s: ClusterState, seq: int, e: SessionScheduled) -> None:
    v = s.sessions.get(e.session_id)
    a = s.agents.get(e.agent_id)
    if v is None or v.status is not S.PENDING or a is None:
        return
    s.queue.pop(v.session_id, None)
    v.agent_id = e.agent_id
    v.devices = e.devices
    _allocate(s, a, v)
    _transition(s, v, S.SCHEDULED, seq, e)


def _terminating(s: ClusterState, seq: int, e: SessionTerminating) -> None:
    v = s.sessions.get(e.session_id)
    if v is None or v.status not in (S.SCHEDULED, S.PREPARING, S.RUNNING):
        return
    v.reason = e.reason
    _transition(s, v, S.TERMINATING, seq, e)


def _preparing(s: ClusterState, seq: int, e: SessionPreparing) -> None:
    v = _reported(s, e.session_id, e.agent_id)
    if v is None or v.status is not S.SCHEDULED:
        return
    _transition(s, v, S.PREPARING, seq, e)


def _running(s: ClusterState, seq: int, e: SessionRunning) -> None:
    v = _reported(s, e.session_id, e.agent_id)
    if v is None or v.status not in (S.SCHEDULED, S.PREPARING):
        return
    v.container_id = e.container_id
    _transition(s, v, S.RUNNING, seq, e)


def _terminated(s: ClusterState, seq: int, e: SessionTerminated) -> None:
    v = _reported(s, e.session_id, e.agent_id)
    if v is None or v.status not in HOLDS_ALLOCATION:
        return
    v.exit_code = e.exit_code
    v.reason = e.reason if v.reason is None else f"{v.reason}; {e.reason}"
    _free(s, v)
    _end(s, v, S.TERMINATED, seq, e)


def _errored(s: ClusterState, seq: int, e: SessionErrored) -> None:
    v = _reported(s, e.session_id, e.agent_id)
    if v is None or v.status not in HOLDS_ALLOCATION:
        return
    v.reason = e.reason
    _free(s, v)
    _end(s, v, S.ERROR, seq, e)


def _destroy_requested(s: ClusterState, seq: int, e: SessionDestroyRequested) -> None:
    if e.id not in s.destroy_answers:  # one stored again later is answered already
        s.destroys[e.id] = e


def _policy_set(s: ClusterState, seq: int, e: PolicySet) -> None:
    s.policies[e.owner] = e


def _payload_rejected(s: ClusterState, seq: int, e: PayloadRejected) -> None:
    s.malformed.pop(e.stream_seq, None)


def _registered(s: ClusterState, seq: int, e: AgentRegistered) -> None:
    _register(s, e)


def _agent_lost(s: ClusterState, seq: int, e: AgentLost) -> None:
    a = s.agents.get(e.agent_id)
    if a is not None:
        a.lost = True
        s.fit.update(a)
        s.changed_agents[a.agent_id] = None


def _nothing(s: ClusterState, seq: int, e: AnyEvent) -> None:
    """Events that change no state: a refusal (it only answers its destroy request) and
    measurements (the projections keep them)."""


_HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = {
    SessionRequested: _requested,
    SessionAdmitted: _admitted,
    SessionRejected: _rejected,
    SessionCancelled: _cancelled,
    SessionQueued: _queued,
    SessionScheduled: _scheduled,
    SessionTerminating: _terminating,
    SessionPreparing: _preparing,
    SessionRunning: _running,
    SessionTerminated: _terminated,
    SessionErrored: _errored,
    SessionDestroyRequested: _destroy_requested,
    DestroyRejected: _nothing,
    PolicySet: _policy_set,
    PayloadRejected: _payload_rejected,
    AgentRegistered: _registered,
    GpuUsageSampled: _nothing,
    GpuOomRefused: _nothing,
    AgentLost: _agent_lost,
}


def _reported(s: ClusterState, session_id: str, agent_id: str) -> SessionView | None:
    """The session, if ``agent_id`` is where it was placed (reports from elsewhere are void)."""
    v = s.sessions.get(session_id)
    if v is None or v.agent_id != agent_id:
        return None
    return v


def _end(s: ClusterState, v: SessionView, status: SessionStatus, seq: int, e: AnyEvent) -> None:
    assert status in ENDED
    s.undecided.pop(v.session_id, None)
    s.queue.pop(v.session_id, None)
    _transition(s, v, status, seq, e)


def _hold_quota(s: ClusterState, v: SessionView) -> None:
    u = s.usage.setdefault(v.owner, OwnerUsage())
    u.sessions += 1
    u.slots = add(u.slots, v.slots)
    v.quota_held = True


def _release_quota(s: ClusterState, v: SessionView) -> None:
    if not v.quota_held:
        return
    u = s.usage[v.owner]
    u.sessions -= 1
    u.slots = sub(u.slots, v.slots)
    v.quota_held = False


def _allocate(s: ClusterState, a: AgentView, v: SessionView) -> None:
    a.allocated = add(a.allocated, v.slots)
    a.sessions[v.session_id] = None
    for d in v.devices:
        g = a.gpus.get(d.gpu_index)
        if g is not None:
            g.give(v.session_id, d.fgpu)
    s.fit.update(a)


def _free(s: ClusterState, v: SessionView) -> None:
    """Give back the session's allocation and quota; it holds neither afterwards."""
    _release_quota(s, v)
    a = s.agents.get(v.agent_id or "")
    if a is None or v.session_id not in a.sessions:
        return
    del a.sessions[v.session_id]
    a.allocated = sub(a.allocated, v.slots)
    for g in a.gpus.values():
        g.take_back(v.session_id)
    s.fit.update(a)


def _register(s: ClusterState, e: AgentRegistered) -> None:
    old = s.agents.get(e.agent_id)
    before = {} if old is None else old.gpus
    # Allocations survive a re-registration: they end only with their sessions.
    gpus = {
        g.index: GpuView(
            info=g,
            capacity=e.fgpu_per_gpu,
            shares=before[g.index].shares if g.index in before else {},
        )
        for g in e.gpus
    }
    a = AgentView(
        agent_id=e.agent_id,
        capacity=e.capacity,
        fgpu_per_gpu=e.fgpu_per_gpu,
        gpus=gpus,
        images=frozenset(e.images),
        runtime=e.runtime,
    )
    if old is not None:
        a.allocated = old.allocated
        a.sessions = old.sessions
    s.agents[e.agent_id] = a
    s.fit.update(a)
    s.changed_agents[e.agent_id] = None
