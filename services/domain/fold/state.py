"""The cluster as a pure fold of the log: ``evolve(state, record) -> state``.

Every actor and every read folds the same records with this one function, so they all
agree on what happened. The fold is deterministic (no clock, no I/O, no randomness) and
total: an event that does not fit the session's current status (a duplicate, a late
report, a decision that lost a race) changes nothing, which is what makes every actor
idempotent under redelivery.

For speed the state is mutated in place and returned; treat it as owned by the fold.
The handlers of each family of events are beside this module (``sessions``, ``agents``,
``admin``); the state they change is ``services.domain.fold.cluster.ClusterState``.
"""

from collections.abc import Callable, Iterable
from typing import Any

from events import (
    AccessGranted,
    AccessRefused,
    AccessSuppressed,
    AgentFenced,
    AnyEvent,
    DestroyRejected,
    Event,
    GpuOomRefused,
    GpuOverSlice,
    GpuShareExceeded,
    Malformed,
    Record,
    RequestsDropped,
    SessionChannelClosed,
    SessionChannelOpened,
    SessionExecFinished,
    SessionExecStarted,
)
from events import subjects as subj
from services.domain.fold import admin, agents, secrets, serving, sessions
from services.domain.fold.cluster import ClusterState
from services.domain.fold.sessions import running_at
from services.domain.records import AgentView, GpuView, OwnerUsage, SessionView, Transition
from services.domain.status import ENDED
from services.domain.subject_rules import SUBJECT_OF, mismatch

__all__ = [
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
    if v is None:
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


def _apply(s: ClusterState, seq: int, e: AnyEvent) -> None:
    _HANDLERS.get(type(e), _nothing)(s, seq, e)
    # A destroy request is answered by the first event that names it as its cause, even
    # one that changed nothing (a stop order that lost the race to the session's end).
    cause = e.causation_id
    if cause is not None:
        request = s.destroys.pop(cause, None)
        if request is not None:
            refused = e.reason if isinstance(e, DestroyRejected) else None
            s.destroy_answers.add(cause, refused)
            s.answered[cause] = (seq, request, refused)


def _nothing(s: ClusterState, seq: int, e: AnyEvent) -> None:
    """Events that change no state: a refusal (it only answers its destroy request),
    measurements, the access audit and commands run in sessions (the projections keep
    them)."""


# What each event does to the state, one handler per type (dispatched on the exact type),
# by family; each handler checks that the event fits the current state, else does nothing.
_HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = {
    **sessions.HANDLERS,
    **agents.HANDLERS,
    **admin.HANDLERS,
    **serving.HANDLERS,
    **secrets.HANDLERS,
    DestroyRejected: _nothing,
    GpuOomRefused: _nothing,
    GpuOverSlice: _nothing,  # the agent stops the session: its end report ends it
    GpuShareExceeded: _nothing,
    AgentFenced: _nothing,
    AccessGranted: _nothing,
    AccessRefused: _nothing,
    AccessSuppressed: _nothing,
    RequestsDropped: _nothing,
    SessionExecStarted: _nothing,
    SessionExecFinished: _nothing,
    SessionChannelOpened: _nothing,
    SessionChannelClosed: _nothing,
}


def forget_ended(s: ClusterState, session_ids: Iterable[str]) -> None:
    """Let go of those of ``session_ids`` that have ended: each leaves ``sessions`` for
    ``ended`` (16 bytes), and the subjects only it wrote to are forgotten. Memory then
    follows live sessions, not history; every rule of the fold ignores an ended session
    either way, and a second request for its id is still ignored."""
    seqs = s.subject_seq
    sessions = s.sessions
    for sid in session_ids:
        v = sessions.get(sid)
        if v is None or v.status not in ENDED:
            continue
        for subject in own_subjects(v):
            seqs.pop(subject, None)
        del sessions[sid]
        s.ended.add(sid)


def clear_changes(s: ClusterState) -> None:
    """Forget the fold's notes of what changed (``changed``, ``answered`` and the rest):
    their owner has looked at them. They grow with every batch until it does."""
    s.changed.clear()
    s.changed_agents.clear()
    s.answered.clear()
    s.admin_answered.clear()
    s.tenancy_changed = False
    s.serving.changed = False


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
