"""Pipeline runs as a pure fold of the log: ``evolve(state, record)``.

A run is made by its request and moved by the pipeline actor's answers on
``fgpu.pipe.<run_id>``; the sessions of its tasks move it too (a task's session ended is
noted, for the actor to answer with the task's end), and so do the serving actor's
answers to a ``serve`` task's request (refused: the task failed; its revision's replicas
all healthy: it succeeded). Every handler checks that the event
fits the run as it stands (its round, the task's attempt, its status), else changes
nothing: folding an event twice, or one the actor applied before the log had it
(``apply``), is harmless. Deterministic: no clock, no I/O.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from events import (
    AdminApplied,
    AdminRefused,
    AnyEvent,
    EndpointCreated,
    EndpointRemoved,
    Malformed,
    PipelineCancelRequested,
    PipelineRequestRefused,
    PipelineRerunRequested,
    PipelineRerunStarted,
    PipelineRetryScheduled,
    PipelineRunCancelled,
    PipelineRunEnded,
    PipelineRunRequested,
    PipelineScheduleFired,
    PipelineScheduleRefused,
    PipelineScheduleRemoved,
    PipelineScheduleSet,
    PipelineSpec,
    PipelineTask,
    PipelineTaskEnded,
    PipelineTaskRequested,
    PipelineTasksEnded,
    PipelineTasksRequested,
    Record,
    ReplicaChanged,
    ReplicaPhase,
    RevisionAdded,
    ServeRefused,
    SessionCancelled,
    SessionErrored,
    SessionLost,
    SessionRejected,
    SessionRunning,
    SessionTerminated,
    TaskAttempt,
    TaskEnd,
)
from services.domain.durations import after
from services.domain.pipelines.check import run_problems
from services.domain.pipelines.schedules import Keys, Schedule, cron_problem, schedule_of
from services.domain.subject_rules import SUBJECT_OF, mismatch

__all__ = [
    "FINAL",
    "Orphan",
    "PipelineState",
    "Run",
    "TaskState",
    "apply",
    "evolve",
    "fold",
    "note_attempt",
    "note_end",
    "set_status",
    "topological",
]

# A task's statuses: waiting (for its dependencies), requested (its attempt's session
# asked for), attempt-failed (an attempt failed and another is due: the retry not yet
# scheduled), retry (the next attempt asked for at ``due``), and the final ones.
FINAL = frozenset({"succeeded", "failed", "skipped", "upstream-failed", "cancelled"})
RequestEvent = PipelineCancelRequested | PipelineRerunRequested
# Requests about no run or schedule of the requester's (answered with a refusal).
Orphan = PipelineCancelRequested | PipelineRerunRequested | PipelineScheduleRemoved


@dataclass(slots=True)
class TaskState:
    status: str = "waiting"
    attempt: int = 0
    session_id: str | None = None
    running: bool = False  # its session runs (for those who look)
    # A retry's due time; a serve task's, asked for with a timeout: when its wait for
    # healthy replicas ends (its attempt's time on the log, plus the timeout).
    due: datetime | None = None
    exit_code: int | None = None
    reason: str = ""
    # The session of the current attempt ended (outcome, exit code, why) and the actor
    # has not yet written the task's end.
    session_end: tuple[str, int | None, str] | None = None
    # A serve task's: the endpoint and revision its request made, its healthy replicas.
    endpoint_id: str | None = None
    revision: int | None = None
    healthy: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Run:
    run_id: str
    owner: str
    spec: PipelineSpec
    project: str | None
    request_id: str
    requested_at: datetime
    round: int = 0
    status: str = "running"  # running, cancelling, then succeeded/failed/cancelled/refused
    refusal: str | None = None  # why its spec can never run (the actor ends it so)
    tasks: dict[str, TaskState] = field(default_factory=dict)
    order: tuple[str, ...] = ()  # the tasks, each after those it depends on
    requests: list[RequestEvent] = field(default_factory=list)  # cancels, reruns to answer
    ended_at: datetime | None = None
    reason: str = ""
    folder: str | None = None  # the run's folder (mounted at /pipeline), once made
    folder_waits: bool = False  # its folder is asked for, not made yet
    # What the actor looks at, so that a decision costs what changed, not the run's size:
    # the tasks that may move (``dirty``: their session ended, a dependency ended, they
    # were reset), those waiting for a retry, and how many have ended.
    after: dict[str, tuple[str, ...]] = field(default_factory=dict)  # its dependents
    index: dict[str, int] = field(default_factory=dict)  # its place in ``order``
    specs: dict[str, PipelineTask] = field(default_factory=dict)  # each task's, by name
    dirty: set[str] = field(default_factory=set)
    retrying: set[str] = field(default_factory=set)
    awaiting: set[str] = field(default_factory=set)  # serve tasks waiting with a deadline
    final: int = 0

    @property
    def ended(self) -> bool:
        return self.status not in ("running", "cancelling")


@dataclass
class PipelineState:
    runs: dict[str, Run] = field(default_factory=dict)
    by_session: dict[str, tuple[str, str]] = field(default_factory=dict)  # -> run, task
    by_serve: dict[str, tuple[str, str]] = field(default_factory=dict)  # serve request ->
    # run, task; and a revision ("<endpoint>/<revision>") whose health a serve task awaits
    by_revision: dict[str, tuple[str, str]] = field(default_factory=dict)
    endpoints: dict[str, tuple[str, str]] = field(default_factory=dict)  # live: owner, name
    # Requests about runs the log does not hold (answered with a refusal).
    orphans: list[Orphan] = field(default_factory=list)
    folders: dict[str, str] = field(default_factory=dict)  # folder request -> its run
    schedules: dict[str, Schedule] = field(default_factory=dict)
    keys: Keys = field(default_factory=Keys)  # who may still act (scheduled runs)
    last_seq: int = 0
    subject_seq: dict[str, int] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)  # runs moved since the actor looked
    # The last sequence of the actor's own appends, applied here before the log gives
    # them back: a snapshot holds nothing the log does not (``settled``).
    ahead: int = 0

    @property
    def settled(self) -> bool:
        return self.last_seq >= self.ahead


def fold(records: Iterable[Record], state: PipelineState | None = None) -> PipelineState:
    s = PipelineState() if state is None else state
    for r in records:
        evolve(s, r)
    return s


def evolve(s: PipelineState, r: Record) -> PipelineState:
    """Apply one record; one at or below ``s.last_seq`` was applied already."""
    if r.seq <= s.last_seq:
        return s
    s.last_seq = r.seq
    if r.seq > s.subject_seq.get(r.subject, 0):
        s.subject_seq[r.subject] = r.seq
    e = r.event
    if isinstance(e, Malformed) or type(e) not in _HANDLERS:
        return s
    if SUBJECT_OF[type(e)](e) != r.subject and mismatch(r.subject, e) is not None:
        return s  # not where it may stand: it counts for nothing
    apply(s, e)
    return s


def apply(s: PipelineState, e: AnyEvent) -> None:
    """Apply ``e`` (from the log, or about to be appended by the actor)."""
    _HANDLERS[type(e)](s, e)


def topological(spec: PipelineSpec) -> tuple[str, ...]:
    """The tasks of ``spec`` (a DAG) each after its dependencies, else in the spec's order."""
    deps = {t.name: t.dependencies for t in spec.tasks}
    done: dict[str, None] = {}
    for root in deps:
        stack = [(root, iter(deps[root]))]
        while stack:
            name, rest = stack[-1]
            nxt = next(rest, None)
            if nxt is None:
                stack.pop()
                done.setdefault(name, None)
            elif nxt not in done and nxt in deps and all(nxt != n for n, _ in stack):
                stack.append((nxt, iter(deps[nxt])))
    return tuple(done)


def _run_requested(s: PipelineState, e: PipelineRunRequested) -> None:
    if e.run_id in s.runs:
        return  # a run id asked for twice: the first stands
    run = Run(e.run_id, e.requester, e.spec, e.project, e.id, e.at)
    names = [t.name for t in e.spec.tasks]
    problems = run_problems(e.spec, e.requester)  # the graph's first: a cycle among them
    run.specs = {t.name: t for t in e.spec.tasks}
    if problems:
        run.refusal = problems[0]
    else:
        run.order = topological(e.spec)
        run.index = {n: i for i, n in enumerate(run.order)}
        after: dict[str, list[str]] = {n: [] for n in names}
        for t in e.spec.tasks:
            for d in t.dependencies:
                after[d].append(t.name)
        run.after = {n: tuple(a) for n, a in after.items()}
        run.dirty = set(names)
    run.tasks = {n: TaskState() for n in names}
    if e.folder is not None and e.folder_request is not None:
        run.folder, run.folder_waits = e.folder, True
        s.folders.setdefault(e.folder_request, e.run_id)  # a request names one folder
    s.runs[e.run_id] = run
    s.changed.add(e.run_id)


def _schedule_set(s: PipelineState, e: PipelineScheduleSet) -> None:
    if e.schedule_id in s.schedules:
        return  # set twice: the first stands
    sched = schedule_of(e)
    problems = [p for p in [cron_problem(e.cron)] if p] + run_problems(e.spec, e.requester)
    sched.refusal = problems[0] if problems else None
    s.schedules[e.schedule_id] = sched


def _schedule_removed(s: PipelineState, e: PipelineScheduleRemoved) -> None:
    sched = s.schedules.get(e.schedule_id)
    if sched is None or sched.owner != e.requester:
        s.orphans.append(e)
    else:
        sched.removed = True


def _schedule_acted(s: PipelineState, e: PipelineScheduleFired | PipelineScheduleRefused) -> None:
    sched = s.schedules.get(e.schedule_id)
    if sched is not None and e.due > sched.last:
        sched.last = e.due


def _admin_applied(s: PipelineState, e: AdminApplied) -> None:
    s.keys.apply(e)
    _folder_answered(s, e)


def _folder_answered(s: PipelineState, e: AdminApplied | AdminRefused) -> None:
    """The registrar made the run's folder (its tasks may start), or refused it (the
    run cannot run as asked)."""
    run_id = s.folders.get(e.causation_id or "")
    run = s.runs.get(run_id or "")
    if run is None or not run.folder_waits or e.requester != run.owner:
        return
    del s.folders[e.causation_id or ""]
    run.folder_waits = False
    if isinstance(e, AdminRefused) and run.refusal is None:
        run.refusal = f"its folder could not be made: {e.reason}"
    run.dirty.update(run.tasks)
    s.changed.add(run.run_id)


def set_status(run: Run, name: str, t: TaskState, status: str) -> None:
    """``t`` (task ``name`` of ``run``) goes to ``status``; what depends on it is looked
    at again once it has ended."""
    ended_before, ends = t.status in FINAL, status in FINAL
    t.status = status
    run.final += ends - ended_before
    if status == "retry":
        run.retrying.add(name)
    else:
        run.retrying.discard(name)
    if status != "requested":
        run.awaiting.discard(name)
    if ends:
        run.dirty.update(run.after.get(name, ()))


def _request(s: PipelineState, e: RequestEvent) -> None:
    run = s.runs.get(e.run_id)
    if run is None:
        s.orphans.append(e)
    else:
        run.requests.append(e)
        s.changed.add(e.run_id)


def _refused(s: PipelineState, e: PipelineRequestRefused) -> None:
    s.orphans = [r for r in s.orphans if r.id != e.request_id]
    sched = s.schedules.get(e.run_id)
    if sched is not None and sched.request_id == e.request_id:
        sched.removed = True  # a schedule that can never run, answered
    run = s.runs.get(e.run_id)
    if run is not None:
        run.requests = [r for r in run.requests if r.id != e.request_id]


def _task(s: PipelineState, run_id: str, task: str, round_: int) -> tuple[Run, TaskState] | None:
    run = s.runs.get(run_id)
    if run is None or run.round != round_ or task not in run.tasks:
        return None
    s.changed.add(run_id)
    return run, run.tasks[task]


def _task_requested(s: PipelineState, e: PipelineTaskRequested) -> None:
    attempt = TaskAttempt(task=e.task, attempt=e.attempt, session_id=e.session_id)
    note_attempt(s, e.run_id, e.round, attempt, e.at)


def _tasks_requested(s: PipelineState, e: PipelineTasksRequested) -> None:
    for a in e.tasks:
        note_attempt(s, e.run_id, e.round, a, e.at)


def note_attempt(s: PipelineState, run_id: str, round_: int, a: TaskAttempt, at: datetime) -> None:
    """Attempt ``a`` of round ``round_`` was asked for at ``at`` (one event's or one item's
    of a plural one: the same). A serve task's with a timeout waits for health until
    ``at`` plus it: a time on the log, so every fold of it knows the same deadline."""
    found = _task(s, run_id, a.task, round_)
    if found is None:
        return
    run, t = found
    if t.status not in ("waiting", "retry") or a.attempt <= t.attempt:
        return
    set_status(run, a.task, t, "requested")
    t.attempt, t.session_id = a.attempt, a.session_id
    t.running, t.due, t.session_end = False, None, None
    t.endpoint_id, t.revision, t.healthy = None, None, set()
    (s.by_serve if a.kind == "serve" else s.by_session)[a.session_id] = (run_id, a.task)
    timeout = run.specs[a.task].timeout_s
    if a.kind == "serve" and timeout is not None:
        t.due = after(at, timeout)
        run.awaiting.add(a.task)


def _task_ended(s: PipelineState, e: PipelineTaskEnded) -> None:
    end = TaskEnd(
        task=e.task,
        attempt=e.attempt,
        outcome=e.outcome,
        session_id=e.session_id,
        exit_code=e.exit_code,
        reason=e.reason,
    )
    note_end(s, e.run_id, e.round, end)


def _tasks_ended(s: PipelineState, e: PipelineTasksEnded) -> None:
    for end in e.ends:
        note_end(s, e.run_id, e.round, end)


def note_end(s: PipelineState, run_id: str, round_: int, e: TaskEnd) -> None:
    """Task ``e.task`` of round ``round_`` ended (``PipelineTaskEnded``, or one item of a
    ``PipelineTasksEnded``)."""
    found = _task(s, run_id, e.task, round_)
    if found is None:
        return
    run, t = found
    if t.status in FINAL or t.status == "attempt-failed" or e.attempt != t.attempt:
        return
    again = e.outcome == "failed" and e.attempt < run.specs[e.task].retry_max_attempts
    again = again and run.status == "running"
    set_status(run, e.task, t, "attempt-failed" if again else e.outcome)
    t.exit_code, t.reason, t.session_end, t.running = e.exit_code, e.reason, None, False
    run.dirty.add(e.task)


def _retry(s: PipelineState, e: PipelineRetryScheduled) -> None:
    found = _task(s, e.run_id, e.task, e.round)
    if found is None:
        return
    run, t = found
    if t.status != "attempt-failed" or e.attempt != t.attempt:
        return
    set_status(run, e.task, t, "retry")
    t.due = e.due


def _cancelled(s: PipelineState, e: PipelineRunCancelled) -> None:
    run = s.runs.get(e.run_id)
    if run is None or run.ended or run.status == "cancelling":
        return
    run.status = "cancelling"
    run.requests = [r for r in run.requests if not isinstance(r, PipelineCancelRequested)]
    for name, t in run.tasks.items():
        if t.status in ("waiting", "retry", "attempt-failed"):
            set_status(run, name, t, "cancelled")
            t.reason = "the run was cancelled"
        elif t.status == "requested":
            run.dirty.add(name)  # a serve task has no session end to wait for
    s.changed.add(e.run_id)


def _rerun(s: PipelineState, e: PipelineRerunStarted) -> None:
    run = s.runs.get(e.run_id)
    if run is None or not run.ended or e.round <= run.round:
        return
    run.round, run.status, run.ended_at, run.reason = e.round, "running", None, ""
    run.requests = [r for r in run.requests if not isinstance(r, PipelineRerunRequested)]
    for name in e.tasks:
        if name in run.tasks:
            set_status(run, name, run.tasks[name], "waiting")
            run.tasks[name] = TaskState()
            run.dirty.add(name)
    s.changed.add(e.run_id)


def _run_ended(s: PipelineState, e: PipelineRunEnded) -> None:
    run = s.runs.get(e.run_id)
    if run is None or run.ended or e.round != run.round:
        return
    run.status, run.ended_at, run.reason = e.outcome, e.at, e.reason
    s.changed.add(e.run_id)


def _session_task(s: PipelineState, session_id: str) -> tuple[str, TaskState] | None:
    where = s.by_session.get(session_id)
    if where is None:
        return None
    run = s.runs[where[0]]
    t = run.tasks.get(where[1])
    if t is None or t.session_id != session_id or t.status != "requested":
        return None
    s.changed.add(run.run_id)
    run.dirty.add(where[1])
    return run.run_id, t


def _session_running(s: PipelineState, e: SessionRunning) -> None:
    found = _session_task(s, e.session_id)
    if found is not None:
        found[1].running = True


def _session_ended(s: PipelineState, e: AnyEvent) -> None:
    found = _session_task(s, getattr(e, "session_id", ""))
    if found is None or found[1].session_end is not None:
        return
    if isinstance(e, SessionTerminated):
        code = e.exit_code
        outcome = "succeeded" if code == 0 else "failed"
        why = "" if code == 0 else f"exit code {code}" if code is not None else e.reason
        found[1].session_end = (outcome, code, why)
    else:
        found[1].session_end = ("failed", None, str(getattr(e, "reason", "")))


def _serve_task(s: PipelineState, where: tuple[str, str] | None, request: str) -> TaskState | None:
    """The serve task waiting on request ``request`` (at ``where``), if it still is."""
    if where is None:
        return None
    run = s.runs[where[0]]
    t = run.tasks.get(where[1])
    if t is None or t.session_id != request or t.status != "requested" or t.session_end:
        return None
    s.changed.add(run.run_id)
    run.dirty.add(where[1])
    return t


def _serve_refused(s: PipelineState, e: ServeRefused) -> None:
    request = e.causation_id or ""
    t = _serve_task(s, s.by_serve.get(request), request)
    if t is not None:
        t.session_end = ("failed", None, f"serving refused it: {e.reason}")


def _revision_added(s: PipelineState, e: RevisionAdded) -> None:
    request = e.causation_id or ""
    where = s.by_serve.get(request)
    t = _serve_task(s, where, request)
    if t is not None and where is not None:
        t.endpoint_id, t.revision = e.endpoint_id, e.revision
        s.by_revision[f"{e.endpoint_id}/{e.revision}"] = where


def _replica_changed(s: PipelineState, e: ReplicaChanged) -> None:
    """A replica of a revision a serve task awaits: healthy, counted; else not. All of
    them healthy: the task's end (succeeded) is noted."""
    key = f"{e.endpoint_id}/{e.revision}"
    where = s.by_revision.get(key)
    if where is None:
        return
    run = s.runs[where[0]]
    t = run.tasks.get(where[1])
    serve = run.specs[where[1]].serve if where[1] in run.specs else None
    if t is None or serve is None or t.endpoint_id != e.endpoint_id or t.session_end:
        return
    if e.phase is ReplicaPhase.HEALTHY:
        t.healthy.add(e.session_id)
    else:
        t.healthy.discard(e.session_id)
    if len(t.healthy) >= serve.replicas:
        t.session_end = ("succeeded", None, "")
        del s.by_revision[key]
        s.changed.add(run.run_id)
        run.dirty.add(where[1])


def _endpoint_created(s: PipelineState, e: EndpointCreated) -> None:
    s.endpoints[e.endpoint_id] = (e.owner, e.name)


def _endpoint_removed(s: PipelineState, e: EndpointRemoved) -> None:
    s.endpoints.pop(e.endpoint_id, None)


_HANDLERS: dict[type, Callable[[PipelineState, Any], None]] = {
    PipelineRunRequested: _run_requested,
    PipelineCancelRequested: _request,
    PipelineRerunRequested: _request,
    PipelineRequestRefused: _refused,
    PipelineTaskRequested: _task_requested,
    PipelineTaskEnded: _task_ended,
    PipelineTasksRequested: _tasks_requested,
    PipelineTasksEnded: _tasks_ended,
    PipelineRetryScheduled: _retry,
    PipelineRunCancelled: _cancelled,
    PipelineRerunStarted: _rerun,
    PipelineRunEnded: _run_ended,
    SessionRunning: _session_running,
    SessionTerminated: _session_ended,
    SessionErrored: _session_ended,
    SessionRejected: _session_ended,
    SessionCancelled: _session_ended,
    SessionLost: _session_ended,
    AdminApplied: _admin_applied,
    AdminRefused: _folder_answered,
    PipelineScheduleSet: _schedule_set,
    PipelineScheduleRemoved: _schedule_removed,
    PipelineScheduleFired: _schedule_acted,
    PipelineScheduleRefused: _schedule_acted,
    ServeRefused: _serve_refused,
    RevisionAdded: _revision_added,
    ReplicaChanged: _replica_changed,
    EndpointCreated: _endpoint_created,
    EndpointRemoved: _endpoint_removed,
}
