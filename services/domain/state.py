"""The cluster as a pure fold of the log: ``evolve(state, record) -> state``.

Every actor and every read folds the same records with this one function, so they all
agree on what happened. The fold is deterministic (no clock, no I/O, no randomness) and
total: an event that does not fit the session's current status (a duplicate, a late
report, a decision that lost a race) changes nothing, which is what makes every actor
idempotent under redelivery.

For speed the state is mutated in place and returned; treat it as owned by the fold.
"""

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from events import (
    AccessGranted,
    AccessRefused,
    AccessSuppressed,
    AdminApplied,
    AdminRefused,
    AdminRequested,
    AgentFenced,
    AgentHeard,
    AgentImagesReported,
    AgentLost,
    AgentRegistered,
    AnyEvent,
    DestroyRejected,
    Event,
    GpuOomRefused,
    GpuOverSlice,
    GpuShareExceeded,
    GpuUsageSampled,
    LogArchived,
    LogHealth,
    Malformed,
    PayloadRejected,
    PolicySet,
    Record,
    RequestsDropped,
    SessionAdmitted,
    SessionCancelled,
    SessionChannelClosed,
    SessionChannelOpened,
    SessionCpuSampled,
    SessionDestroyRequested,
    SessionErrored,
    SessionExecFinished,
    SessionExecStarted,
    SessionLost,
    SessionPreparing,
    SessionPulling,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    SessionUnplaced,
    Slots,
    VfolderScanned,
)
from events import subjects as subj
from services.domain.resources import add, sub
from services.domain.status import ENDED, HOLDS_ALLOCATION, SessionStatus
from services.domain.subject_rules import SUBJECT_OF, mismatch
from services.domain.tenancy import DEFAULT, apply, project_key
from services.domain.validation import invalid_request, session_type_of
from services.domain.vfolders import note_scan
from services.domain.views import (
    AgentView,
    ClusterState,
    GpuView,
    OwnerUsage,
    SessionView,
    Transition,
)
from services.domain.workload import Shape

__all__ = [
    "ENDED_STUB",
    "AgentView",
    "ClusterState",
    "GpuView",
    "OwnerUsage",
    "SessionView",
    "Transition",
    "apply_decision",
    "clear_changes",
    "evolve",
    "fold",
    "forget_ended",
    "own_subjects",
    "running_at",
]

S = SessionStatus


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
    s.folded += 1
    subject = r.subject
    # Never backwards: an actor may already know a later sequence of a subject it wrote.
    subject_seq = s.subject_seq
    if seq > subject_seq.get(subject, 0):
        subject_seq[subject] = seq
    e = r.event
    if isinstance(e, Malformed):
        s.malformed[seq] = (subject, e.error)
        return s
    if SUBJECT_OF[type(e)](e) != subject:  # else it stands on its own: the usual case
        problem = mismatch(subject, e)
        if problem is not None:
            s.malformed[seq] = (subject, problem)
            return s
    _apply(s, seq, e)
    if s.unconfirmed and e.id in s.unconfirmed:
        _confirm(s, seq, e)
    return s


def _confirm(s: ClusterState, seq: int, e: AnyEvent) -> None:
    """``e``, applied before the log had it (``apply_decision``), is back with its
    sequence: the transition it made gets it, as a fold of the log alone gives it."""
    del s.unconfirmed[e.id]
    sid = getattr(e, "session_id", None)
    v = s.sessions.get(sid) if isinstance(sid, str) else None
    if v is None or v is ENDED_STUB:
        return
    history = v.history
    for i in range(len(history) - 1, -1, -1):
        t = history[i]
        if t.event_id == e.id:
            if t.seq == 0:
                history[i] = Transition(t.status, t.at, seq, t.event_id)
            return


def apply_decision(s: ClusterState, e: AnyEvent) -> ClusterState:
    """Apply an event this process is about to append, before the log has it.

    Lets an actor account for its own decisions within one round (two placements must not
    take the same share). When the event comes back from the log the fold's status guards
    make it a no-op, and the transition it made gets its sequence (``unconfirmed``). If
    the append fails, the caller must rebuild the state from the log.
    """
    _apply(s, 0, e)
    s.unconfirmed[e.id] = None
    return s


def _transition(
    s: ClusterState, v: SessionView, status: SessionStatus, seq: int, e: AnyEvent
) -> None:
    if v.status is S.RUNNING:
        s.running.remove(v, running_at(v))
    v.status = status
    v.history.append(Transition(status, e.at, seq, e.id))
    s.changed[v.session_id] = None
    if status is S.RUNNING:
        s.running.add(v, e.at)


def running_at(v: SessionView) -> datetime:
    """When it started running (the agent's report's time; its request's if it never
    did)."""
    for t in reversed(v.history):
        if t.status is S.RUNNING:
            return t.at
    return v.requested_at


def _was_active(s: ClusterState, v: SessionView, at: datetime) -> None:
    """``v``, RUNNING, showed activity at ``at``."""
    before = v.active_at
    if before is not None and before >= at:
        return
    v.active_at = at
    s.running.active(v, before, running_at(v))


def _apply(s: ClusterState, seq: int, e: AnyEvent) -> None:
    _HANDLERS.get(type(e), _nothing)(s, seq, e)
    # A destroy request is answered by the first event that names it as its cause, even
    # one that changed nothing (a stop order that lost the race to the session's end).
    cause = e.causation_id
    if cause is not None:
        request = s.destroys.pop(cause, None)
        if request is not None:
            refused = e.reason if isinstance(e, DestroyRejected) else None
            s.destroy_answers[cause] = refused
            s.answered[cause] = (seq, request, refused)


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
        gpu_models=e.gpu_models,
        cpu_only=e.cpu_only,
        group=e.group or DEFAULT,
        lifetime_s=e.lifetime_s,
        session_type=session_type_of(e),
        mounts=e.mounts,
    )
    _assign_tenant(s, v, e.project)
    s.sessions[e.session_id] = v
    _transition(s, v, S.REQUESTED, seq, e)
    s.undecided[e.session_id] = None


def _assign_tenant(s: ClusterState, v: SessionView, asked: str | None) -> None:
    """Whose ``v`` is, as the tenancy stands: its key's user, the project it names (else
    the user's default one) and their domain. Without tenancy, or for a key of no user,
    the ``default`` domain and project: the quota actor decides what a key of no user
    may have (nothing, once there is tenancy)."""
    user = s.tenancy.user_of(v.owner)
    if user is None:
        return
    v.user = user.user
    v.domain = user.domain
    v.project = project_key(user.domain, asked or user.default_project or DEFAULT)


def _admitted(s: ClusterState, seq: int, e: SessionAdmitted) -> None:
    v = s.sessions.get(e.session_id)
    if v is None or v.status is not S.REQUESTED:
        return
    if e.image is not None:
        v.image = e.image  # an alias, resolved: what the scheduler and the agent go by
    v.storage_hosts = e.storage_hosts  # before it is queued: its shape says them
    _transition(s, v, S.PENDING, seq, e)
    s.undecided.pop(v.session_id, None)
    s.queue.add(v)
    _hold_quota(s, v)
    s.workload.note(Shape(v.slots.fgpu, v.slots.cpu, v.slots.mem, v.gpu_models))


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
    s.queue.told(v)
    s.changed[v.session_id] = None


def _scheduled(s: ClusterState, seq: int, e: SessionScheduled) -> None:
    v = s.sessions.get(e.session_id)
    a = s.agents.get(e.agent_id)
    if v is None or v.status is not S.PENDING or a is None:
        return
    s.queue.remove(v)
    _unpend(s, v)
    v.agent_id = e.agent_id
    v.devices = e.devices
    _allocate(s, a, v)
    s.last_placed = a.agent_id
    _transition(s, v, S.SCHEDULED, seq, e)


def _terminating(s: ClusterState, seq: int, e: SessionTerminating) -> None:
    v = s.sessions.get(e.session_id)
    if v is None or v.status not in (S.SCHEDULED, S.PREPARING, S.PULLING, S.RUNNING):
        return
    v.reason = e.reason
    _transition(s, v, S.TERMINATING, seq, e)


def _preparing(s: ClusterState, seq: int, e: SessionPreparing) -> None:
    v = _reported(s, e.session_id, e.agent_id)
    if v is None or v.status is not S.SCHEDULED:
        return
    _transition(s, v, S.PREPARING, seq, e)


def _pulling(s: ClusterState, seq: int, e: SessionPulling) -> None:
    """The first report makes the session PULLING; later ones only say how far it got."""
    v = _reported(s, e.session_id, e.agent_id)
    if v is None or v.status not in (S.SCHEDULED, S.PREPARING, S.PULLING):
        return
    v.pulled, v.pull_total = e.current, e.total
    if v.status is S.PULLING:
        s.changed[v.session_id] = None
    else:
        _transition(s, v, S.PULLING, seq, e)


def _running(s: ClusterState, seq: int, e: SessionRunning) -> None:
    v = _reported(s, e.session_id, e.agent_id)
    if v is None or v.status not in (S.SCHEDULED, S.PREPARING, S.PULLING):
        return
    v.container_id = e.container_id
    v.active_at = e.at
    _transition(s, v, S.RUNNING, seq, e)


def _gpu_sampled(s: ClusterState, seq: int, e: GpuUsageSampled) -> None:
    """Active when a kernel was launched since the last sample, or memory is held."""
    v = s.sessions.get(e.session_id)
    if v is None or v is ENDED_STUB or v.status is not S.RUNNING:
        return
    if e.mem_used > 0 or e.launches > v.launches.get(e.gpu_index, 0):
        _was_active(s, v, e.at)
    v.launches[e.gpu_index] = max(e.launches, v.launches.get(e.gpu_index, 0))


def _cpu_sampled(s: ClusterState, seq: int, e: SessionCpuSampled) -> None:
    v = s.sessions.get(e.session_id)
    if v is None or v is ENDED_STUB or v.status is not S.RUNNING:
        return
    if e.cpu_ns > v.cpu_ns:
        v.cpu_ns = e.cpu_ns
        _was_active(s, v, e.at)


def _terminated(s: ClusterState, seq: int, e: SessionTerminated) -> None:
    v = _holding(s, e.session_id, e.agent_id)
    if v is not None:
        v.exit_code = e.exit_code
        v.reason = e.reason if v.reason is None else f"{v.reason}; {e.reason}"
        _free(s, v)
        _end(s, v, S.TERMINATED, seq, e)


def _errored(s: ClusterState, seq: int, e: SessionErrored | SessionLost) -> None:
    """Ended in error: by its agent (it could not start it), or by the scheduler (its
    agent was lost for longer than the grace)."""
    v = _holding(s, e.session_id, e.agent_id)
    if v is not None:
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


def _admin_requested(s: ClusterState, seq: int, e: AdminRequested) -> None:
    s.admin_requests[e.id] = e


def _admin_applied(s: ClusterState, seq: int, e: AdminApplied) -> None:
    _admin_answer(s, seq, e.causation_id, None)
    apply(s.tenancy, e.command)
    s.tenancy_changed = True


def _admin_refused(s: ClusterState, seq: int, e: AdminRefused) -> None:
    _admin_answer(s, seq, e.causation_id, (e.code, e.reason))


def _admin_answer(
    s: ClusterState, seq: int, cause: str | None, refused: tuple[str, str] | None
) -> None:
    """The first answer naming a request as its cause answers it (what the system applied
    at the start answers none)."""
    request = s.admin_requests.pop(cause, None) if cause is not None else None
    if request is not None:
        s.admin_answered[request.id] = (seq, request, refused)


def _registered(s: ClusterState, seq: int, e: AgentRegistered) -> None:
    _register(s, e)
    s.agents[e.agent_id].registered_seq = seq


def _images_reported(s: ClusterState, seq: int, e: AgentImagesReported) -> None:
    a = s.agents.get(e.agent_id)
    if a is not None:
        a.images = frozenset(i.ref for i in e.images)
        a.image_details = e.images
        s.changed_agents[a.agent_id] = None


def _agent_lost(s: ClusterState, seq: int, e: AgentLost) -> None:
    a = s.agents.get(e.agent_id)
    if a is not None and not a.lost:
        a.lost = True
        a.lost_at = e.at
        s.fit.update(a)
        s.changed_agents[a.agent_id] = None


def _agent_heard(s: ClusterState, seq: int, e: AgentHeard) -> None:
    a = s.agents.get(e.agent_id)
    if a is not None and seq > a.heard_seq:
        a.heard_seq = seq
        s.changed_agents[a.agent_id] = None


def _archived(s: ClusterState, seq: int, e: LogArchived) -> None:
    """Records up to ``e.last_seq`` leave the stream (but those on subjects kept for good):
    a subject whose last record was one of them has none left, and an append expecting
    its last sequence must expect none (0), as the server then does."""
    seqs = s.subject_seq
    for subject in [k for k, v in seqs.items() if v <= e.last_seq]:
        if subject not in subj.KEPT_SUBJECTS:
            del seqs[subject]


def _unplaced(s: ClusterState, seq: int, e: SessionUnplaced) -> None:
    """A placement its agent never acted on, taken back: PENDING again, in its place in
    the queue, its quota still held."""
    v = s.sessions.get(e.session_id)
    if v is None or v.status is not S.SCHEDULED or v.agent_id != e.agent_id:
        return
    _take_back(s, v)
    v.agent_id, v.devices, v.waiting = None, (), None
    _transition(s, v, S.PENDING, seq, e)
    s.queue.add(v)
    if v.quota_held:
        _count(s.pending.setdefault(v.owner, OwnerUsage()), v, +1)


def _vfolder_scanned(s: ClusterState, seq: int, e: VfolderScanned) -> None:
    note_scan(s.tenancy, e)


def _log_health(s: ClusterState, seq: int, e: LogHealth) -> None:
    s.log_space[e.server] = e  # the latest of each server's stands


def _nothing(s: ClusterState, seq: int, e: AnyEvent) -> None:
    """Events that change no state: a refusal (it only answers its destroy request),
    measurements, the access audit and commands run in sessions (the projections keep
    them)."""


_HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = {
    SessionRequested: _requested,
    SessionAdmitted: _admitted,
    SessionRejected: _rejected,
    SessionCancelled: _cancelled,
    SessionQueued: _queued,
    SessionScheduled: _scheduled,
    SessionTerminating: _terminating,
    SessionPreparing: _preparing,
    SessionPulling: _pulling,
    SessionRunning: _running,
    SessionTerminated: _terminated,
    SessionErrored: _errored,
    SessionDestroyRequested: _destroy_requested,
    DestroyRejected: _nothing,
    PolicySet: _policy_set,
    PayloadRejected: _payload_rejected,
    AgentRegistered: _registered,
    GpuUsageSampled: _gpu_sampled,
    SessionCpuSampled: _cpu_sampled,
    GpuOomRefused: _nothing,
    GpuOverSlice: _nothing,  # the agent stops the session: its end report ends it
    GpuShareExceeded: _nothing,
    AgentLost: _agent_lost,
    AdminRequested: _admin_requested,
    AdminApplied: _admin_applied,
    AdminRefused: _admin_refused,
    SessionUnplaced: _unplaced,
    SessionLost: _errored,
    AgentFenced: _nothing,
    AgentHeard: _agent_heard,
    AgentImagesReported: _images_reported,
    AccessGranted: _nothing,
    AccessRefused: _nothing,
    AccessSuppressed: _nothing,
    RequestsDropped: _nothing,
    LogArchived: _archived,
    SessionExecStarted: _nothing,
    SessionExecFinished: _nothing,
    SessionChannelOpened: _nothing,
    SessionChannelClosed: _nothing,
    VfolderScanned: _vfolder_scanned,
    LogHealth: _log_health,
}


def _reported(s: ClusterState, session_id: str, agent_id: str) -> SessionView | None:
    """The session, if ``agent_id`` is where it was placed (reports from elsewhere are void)."""
    v = s.sessions.get(session_id)
    if v is None or v.agent_id != agent_id:
        return None
    return v


def _holding(s: ClusterState, session_id: str, agent_id: str) -> SessionView | None:
    """The session, if reported from its agent and holding an allocation there."""
    v = _reported(s, session_id, agent_id)
    return v if v is not None and v.status in HOLDS_ALLOCATION else None


def _end(s: ClusterState, v: SessionView, status: SessionStatus, seq: int, e: AnyEvent) -> None:
    assert status in ENDED
    s.undecided.pop(v.session_id, None)
    s.queue.remove(v)
    _transition(s, v, status, seq, e)


def _levels(s: ClusterState, v: SessionView) -> list[OwnerUsage]:
    """What ``v`` holds quota against: its owner's, and its user's, project's, domain's."""
    out = [s.usage.setdefault(v.owner, OwnerUsage())]
    if v.user is not None:
        out.append(s.held.setdefault(f"user:{v.user}", OwnerUsage()))
    out.append(s.held.setdefault(f"project:{v.project}", OwnerUsage()))
    out.append(s.held.setdefault(f"domain:{v.domain}", OwnerUsage()))
    return out


def _count(u: OwnerUsage, v: SessionView, sign: int) -> None:
    u.sessions += sign
    u.slots = add(u.slots, v.slots) if sign > 0 else sub(u.slots, v.slots)


def _hold_quota(s: ClusterState, v: SessionView) -> None:
    """Admitted: ``v`` holds its slots at every level until it ends, and is pending (on
    its owner's account) until it is placed."""
    for u in _levels(s, v):
        _count(u, v, +1)
    _count(s.pending.setdefault(v.owner, OwnerUsage()), v, +1)
    v.quota_held = True


def _unpend(s: ClusterState, v: SessionView) -> None:
    if v.quota_held and v.status is S.PENDING:
        _count(s.pending[v.owner], v, -1)


def _release_quota(s: ClusterState, v: SessionView) -> None:
    if not v.quota_held:
        return
    _unpend(s, v)
    for u in _levels(s, v):
        _count(u, v, -1)
    v.quota_held = False


def _allocate(s: ClusterState, a: AgentView, v: SessionView) -> None:
    a.allocated = add(a.allocated, v.slots)
    a.sessions[v.session_id] = None
    s.shares.allocated(a.group, v)
    for d in v.devices:
        g = a.gpus.get(d.gpu_index)
        if g is not None:
            g.give(v.session_id, d.fgpu)
    s.fit.update(a)


def _free(s: ClusterState, v: SessionView) -> None:
    """Give back the session's allocation and quota; it holds neither afterwards."""
    _release_quota(s, v)
    _take_back(s, v)


def _take_back(s: ClusterState, v: SessionView) -> None:
    """Give back the session's allocation on its agent (its quota stays held)."""
    a = s.agents.get(v.agent_id or "")
    if a is None or v.session_id not in a.sessions:
        return
    del a.sessions[v.session_id]
    a.allocated = sub(a.allocated, v.slots)
    s.shares.taken_back(a.group, v)
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
        group=e.group,
        image_details=e.image_details,
        registry=e.registry,
        storage_hosts=e.storage_hosts,
    )
    if old is not None:
        a.allocated = old.allocated
        a.sessions = old.sessions
    s.shares.agent(old, a, s.sessions)
    s.agents[e.agent_id] = a
    s.fit.update(a)
    s.changed_agents[e.agent_id] = None


ENDED_STUB = SessionView(
    session_id="",
    owner="",
    image="",
    command=(),
    slots=Slots(),
    priority=0,
    name=None,
    request_id="",
    correlation_id="",
    arrival_seq=0,
    requested_at=datetime(1970, 1, 1, tzinfo=UTC),
    status=S.TERMINATED,
)
"""Stands in for an ended session the state let go of: the fold never changes it, and a
second request for its id is still ignored, as it would be with the whole session kept."""


def forget_ended(s: ClusterState, session_ids: Iterable[str]) -> None:
    """Let go of those of ``session_ids`` that have ended: each becomes ``ENDED_STUB``, and
    the subjects only it wrote to are forgotten. Memory then follows live sessions, not
    history; every rule of the fold ignores an ended session either way."""
    seqs = s.subject_seq
    for sid in session_ids:
        v = s.sessions.get(sid)
        if v is None or v is ENDED_STUB or v.status not in ENDED:
            continue
        for subject in own_subjects(v):
            seqs.pop(subject, None)
        s.sessions[sid] = ENDED_STUB


def clear_changes(s: ClusterState) -> None:
    """Forget the fold's notes of what changed (``changed``, ``answered`` and the rest):
    their owner has looked at them. They grow with every batch until it does."""
    s.changed.clear()
    s.changed_agents.clear()
    s.answered.clear()
    s.admin_answered.clear()
    s.tenancy_changed = False


def own_subjects(v: SessionView) -> tuple[str, ...]:
    """The subjects only session ``v`` writes to: its request's, its agent's reports,
    usage and commands run in it; once it has ended, nothing appends expecting them."""
    sid = v.session_id
    if v.agent_id is None:
        return (subj.request(v.owner, sid),)
    return (
        subj.request(v.owner, sid),
        subj.agent_session(v.agent_id, sid),
        subj.usage(v.agent_id, sid),
        subj.agent_exec(v.agent_id, sid),
    )
