"""The fold of a session"s own events: its request, admission, placement, reports and end.

Each handler checks that the event fits the session"s current status and otherwise does
nothing; ``HANDLERS`` maps each event type to its handler (``services.domain.fold.state``
dispatches on the exact type).
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from events import (
    AnyEvent,
    Event,
    GpuUsageSampled,
    SessionAdmitted,
    SessionCancelled,
    SessionCpuSampled,
    SessionDestroyRequested,
    SessionErrored,
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
)
from services.domain.fold.cluster import ClusterState
from services.domain.fold.holdings import (
    allocate,
    count,
    free,
    hold_quota,
    release_quota,
    take_back,
    unpend,
)
from services.domain.fold.validation import invalid_request, session_type_of
from services.domain.fold.workload import Shape
from services.domain.records import OwnerUsage, SessionView, Transition
from services.domain.status import ENDED, HOLDS_ALLOCATION, SessionStatus
from services.domain.tenancy.admin import DEFAULT, project_key

S = SessionStatus

__all__ = ["HANDLERS", "running_at"]


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
    """When it started running (the agent"s report"s time; its request"s if it never
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


def _requested(s: ClusterState, seq: int, e: SessionRequested) -> None:
    if e.session_id in s.sessions or e.session_id in s.ended:
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
        env=e.env,
    )
    if e.secret_env:
        # Set apart, not as one more keyword above: that call, one argument longer, kept
        # ~100 bytes more per session folded until a full collection (the churn test).
        v.secret_env = e.secret_env
    _assign_tenant(s, v, e.project)
    s.sessions[e.session_id] = v
    _transition(s, v, S.REQUESTED, seq, e)
    s.undecided[e.session_id] = None


def _assign_tenant(s: ClusterState, v: SessionView, asked: str | None) -> None:
    """Whose ``v`` is, as the tenancy stands: its key"s user, the project it names (else
    the user"s default one) and their domain. Without tenancy, or for a key of no user,
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
    hold_quota(s, v)
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
    release_quota(s, v)
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
    unpend(s, v)
    v.agent_id = e.agent_id
    v.devices = e.devices
    allocate(s, a, v)
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
    v.host = e.host
    v.active_at = e.at
    _transition(s, v, S.RUNNING, seq, e)


def _gpu_sampled(s: ClusterState, seq: int, e: GpuUsageSampled) -> None:
    """Active when a kernel was launched since the last sample, or memory is held."""
    v = s.sessions.get(e.session_id)
    if v is None or v.status is not S.RUNNING:
        return
    if e.mem_used > 0 or e.launches > v.launches.get(e.gpu_index, 0):
        _was_active(s, v, e.at)
    v.launches[e.gpu_index] = max(e.launches, v.launches.get(e.gpu_index, 0))


def _cpu_sampled(s: ClusterState, seq: int, e: SessionCpuSampled) -> None:
    v = s.sessions.get(e.session_id)
    if v is None or v.status is not S.RUNNING:
        return
    if e.cpu_ns > v.cpu_ns:
        v.cpu_ns = e.cpu_ns
        _was_active(s, v, e.at)


def _terminated(s: ClusterState, seq: int, e: SessionTerminated) -> None:
    v = _holding(s, e.session_id, e.agent_id)
    if v is not None:
        v.exit_code = e.exit_code
        v.reason = e.reason if v.reason is None else f"{v.reason}; {e.reason}"
        free(s, v)
        _end(s, v, S.TERMINATED, seq, e)


def _errored(s: ClusterState, seq: int, e: SessionErrored | SessionLost) -> None:
    """Ended in error: by its agent (it could not start it), or by the scheduler (its
    agent was lost for longer than the grace)."""
    v = _holding(s, e.session_id, e.agent_id)
    if v is not None:
        v.reason = e.reason
        free(s, v)
        _end(s, v, S.ERROR, seq, e)


def _destroy_requested(s: ClusterState, seq: int, e: SessionDestroyRequested) -> None:
    if e.id not in s.destroy_answers:  # one stored again later is answered already
        s.destroys[e.id] = e


def _unplaced(s: ClusterState, seq: int, e: SessionUnplaced) -> None:
    """A placement its agent never acted on, taken back: PENDING again, in its place in
    the queue, its quota still held."""
    v = s.sessions.get(e.session_id)
    if v is None or v.status is not S.SCHEDULED or v.agent_id != e.agent_id:
        return
    take_back(s, v)
    v.agent_id, v.devices, v.waiting = None, (), None
    _transition(s, v, S.PENDING, seq, e)
    s.queue.add(v)
    if v.quota_held:
        count(s.pending.setdefault(v.owner, OwnerUsage()), v, +1)


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


HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = {
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
    GpuUsageSampled: _gpu_sampled,
    SessionCpuSampled: _cpu_sampled,
    SessionUnplaced: _unplaced,
    SessionLost: _errored,
}
