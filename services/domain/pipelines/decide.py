"""What the pipeline actor writes for one run, given the run as folded and the time:
answers to cancels and reruns, each task's end once its session ended, retries when due,
the requests of the tasks whose dependencies are done, the run's end. Pure.

Each decision is applied to the run as it is made (``runs.apply``), so a task whose
dependencies end in this same pass is decided too (skips chain through at once); when
the decisions come back from the log the fold finds them applied already.

The run's events come first, then the requests they name (``SessionRequested``,
``SessionDestroyRequested``, in the owner's name): the actor writes them as atomic batches
expecting the run's subject, so a task's attempt is asked for with its session request
or not at all.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from events import (
    AnyEvent,
    PipelineCancelRequested,
    PipelineRequestRefused,
    PipelineRerunStarted,
    PipelineRetryScheduled,
    PipelineRunCancelled,
    PipelineRunEnded,
    PipelineScheduleRemoved,
    PipelineTask,
    PipelineTasksEnded,
    PipelineTasksRequested,
    ServeRequested,
    SessionDestroyRequested,
    TaskAttempt,
    TaskEnd,
    TaskOutcome,
)
from events import subjects as subj
from services.domain.durations import after
from services.domain.pipelines.dag import descendants
from services.domain.pipelines.requests import RunIds, serve_command, task_request
from services.domain.pipelines.runs import (
    FINAL,
    Orphan,
    PipelineState,
    RequestEvent,
    Run,
    TaskState,
    apply,
    note_attempt,
    note_end,
)

__all__ = ["ACTOR", "Decisions", "decide", "next_due", "refuse_orphan"]

ACTOR = "pipeline"
E = TypeVar("E", bound=AnyEvent)
# The most task attempts (or ends) one event holds: with the session requests it names,
# an atomic batch stays within the log's limit (MAX_BATCH, 1000).
GROUP_MAX = 400
# A dependency that ended so stops its dependents (unless it may fail: continue_on_failure).
_BLOCKING = frozenset({"failed", "upstream-failed", "cancelled"})


@dataclass
class Decisions:
    """What to append for one run: the run's own events, then the requests they name."""

    run: list[tuple[str, AnyEvent]]
    requests: list[tuple[str, AnyEvent]]

    def __bool__(self) -> bool:
        return bool(self.run or self.requests)


def decide(
    s: PipelineState, run: Run, salt: str, now: datetime, *, resend: bool = False
) -> Decisions:
    """The decisions for ``run`` now, applied to ``s`` as they are made. ``resend``: the
    first decision since the actor rebuilt: a cancelling run's destroy requests are sent
    again (the actor may have stopped before it sent them all)."""
    d = _Decider(s, run, RunIds(salt, run.run_id), now, Decisions([], []))
    d.answer_requests()
    if run.refusal is not None and not run.ended:
        d.end("refused", run.refusal)
    elif run.status == "cancelling":
        if resend:
            d.destroy_live(None)
        d.cancelling()
    elif run.status == "running" and not run.folder_waits:
        d.advance()
    d.flush()
    return d.out


def refuse_orphan(s: PipelineState, r: Orphan, salt: str, now: datetime) -> PipelineRequestRefused:
    """The refusal of a request about no run (or schedule) of its requester's, applied."""
    about = r.schedule_id if isinstance(r, PipelineScheduleRemoved) else r.run_id
    what = "schedule" if isinstance(r, PipelineScheduleRemoved) else "run"
    e = PipelineRequestRefused(
        id=RunIds(salt, about).event("orphan", r.id),
        at=now,
        actor=ACTOR,
        causation_id=r.id,
        run_id=about,
        requester=r.requester,
        request_id=r.id,
        reason=f"no {what} {about} of yours",
    )
    apply(s, e)
    return e


def next_due(run: Run) -> datetime | None:
    """The earliest time a retry of ``run`` is due, or a serve task's wait for health
    ends, if any waits."""
    dues = [run.tasks[n].due for n in (*run.retrying, *run.awaiting)]
    return min((d for d in dues if d is not None), default=None)


def _due_now(t: TaskState, now: datetime) -> bool:
    return t.status == "retry" and t.due is not None and t.due <= now


def _in_order(run: Run) -> list[str]:
    """The tasks to look at (``run.dirty``, taken), each after those it depends on."""
    todo = sorted(run.dirty, key=lambda n: run.index.get(n, 0))
    run.dirty.clear()
    return todo


@dataclass
class _Group:
    """Task attempts (or ends) decided one after the other, written as one event whose
    id is made from its first item: an attempt is asked for (and ends) once."""

    id: str
    attempts: list[TaskAttempt] = field(default_factory=list)
    ends: list[TaskEnd] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.attempts) + len(self.ends)


@dataclass
class _Decider:
    s: PipelineState
    run: Run
    ids: RunIds
    now: datetime
    out: Decisions
    group: _Group | None = None  # the plural event being filled, applied already

    def _add(self, e: AnyEvent) -> None:
        self.flush()
        apply(self.s, e)
        self._out(e)

    def _out(self, e: AnyEvent) -> None:
        self.out.run.append((subj.pipeline_run(self.run.run_id), e))

    def flush(self) -> None:
        """The group being filled as its event, after those decided before it."""
        g, self.group = self.group, None
        if g is None:
            return
        run = self.run
        fields: dict[str, Any] = {
            "id": g.id,
            "at": self.now,
            "actor": ACTOR,
            "correlation_id": run.request_id,
            "run_id": run.run_id,
            "round": run.round,
        }
        if g.attempts:
            self._out(PipelineTasksRequested(tasks=tuple(g.attempts), **fields))
        else:
            self._out(PipelineTasksEnded(ends=tuple(g.ends), **fields))

    def _group(self, kind: type[AnyEvent], name: str, attempt: int) -> _Group:
        """The group of ``kind`` to add task ``name``'s attempt to: the one being filled
        if of that kind and not full, else a new one (the last one written first)."""
        g = self.group
        same = g is not None and bool(g.attempts) == (kind is PipelineTasksRequested)
        if g is None or not same or len(g) >= GROUP_MAX:
            self.flush()
            tag = str(kind.__struct_config__.tag)
            g = self.group = _Group(self.ids.event(tag, self.run.round, name, attempt))
        return g

    def _new(self, cls: type[E], key: tuple[object, ...], **fields: Any) -> E:
        """A new ``cls`` whose id is made from its kind, the run's round and ``key``."""
        return cls(
            id=self.ids.event(str(cls.__struct_config__.tag), self.run.round, *key),
            at=self.now,
            actor=ACTOR,
            correlation_id=self.run.request_id,
            **fields,
        )

    def answer_requests(self) -> None:
        for r in list(self.run.requests):
            why = self._refusal(r)
            if why is not None:
                self._add(
                    self._new(
                        PipelineRequestRefused,
                        (r.id,),
                        causation_id=r.id,
                        run_id=self.run.run_id,
                        requester=r.requester,
                        request_id=r.id,
                        reason=why,
                    )
                )
            elif isinstance(r, PipelineCancelRequested):
                self._cancel(r)
            else:
                tasks = tuple(descendants(self.run.spec.tasks, r.from_task))
                self._add(
                    self._new(
                        PipelineRerunStarted,
                        (r.id,),
                        causation_id=r.id,
                        run_id=self.run.run_id,
                        round=self.run.round + 1,
                        from_task=r.from_task,
                        tasks=tasks,
                    )
                )

    def _refusal(self, r: RequestEvent) -> str | None:
        run = self.run
        if r.requester != run.owner:
            return f"no run {run.run_id} of yours"  # another's run is not said to exist
        if isinstance(r, PipelineCancelRequested):
            return f"run {run.run_id} has ended ({run.status})" if run.ended else None
        if not run.ended:
            return f"run {run.run_id} is still going: cancel it, or wait for its end"
        if run.status == "refused":
            return f"run {run.run_id} was refused: {run.reason}"
        if r.from_task not in run.tasks:
            return f"run {run.run_id} has no task {r.from_task!r}"
        return None

    def _cancel(self, r: PipelineCancelRequested) -> None:
        cancelled = self._new(
            PipelineRunCancelled,
            (),
            causation_id=r.id,
            run_id=self.run.run_id,
            requester=r.requester,
        )
        self._add(cancelled)
        self.destroy_live(cancelled.id)

    def destroy_live(self, cause: str | None) -> None:
        """Ask, in the owner's name, that each session of the run still going end (a
        serve task's endpoint stays: it is the owner's, as made)."""
        for name, t in self.run.tasks.items():
            if t.status != "requested" or t.session_end is not None or t.session_id is None:
                continue
            if self.run.specs[name].serve is not None:
                continue
            self.out.requests.append(
                (
                    subj.request(self.run.owner, t.session_id),
                    SessionDestroyRequested(
                        id=self.ids.event("destroy", t.session_id),
                        at=self.now,
                        actor=ACTOR,
                        causation_id=cause,
                        correlation_id=self.run.request_id,
                        session_id=t.session_id,
                        requester=self.run.owner,
                    ),
                )
            )

    def cancelling(self) -> None:
        run = self.run
        for name in _in_order(run):
            t = run.tasks[name]
            serving = run.specs[name].serve is not None  # no session to wait for
            if t.status == "requested" and (t.session_end is not None or serving):
                code = None if t.session_end is None else t.session_end[1]
                self._ended(name, t, "cancelled", code, "the run was cancelled")
        if run.final == len(run.tasks):
            self.end("cancelled", "")

    def advance(self) -> None:
        """Each task that may move, in dependency order, those its moves free too."""
        run = self.run
        specs = run.specs
        run.dirty.update(n for n in run.retrying if _due_now(run.tasks[n], self.now))
        self._timed_out()
        while run.dirty:
            for name in _in_order(run):
                self._step(name, run.tasks[name], specs)
        if run.final == len(run.tasks):
            failed = [n for n in run.order if self._blocks(n, specs)]
            why = f"task {failed[0]} {run.tasks[failed[0]].status}" if failed else ""
            self.end("failed" if failed else "succeeded", why)

    def _timed_out(self) -> None:
        """Each serve task whose wait for healthy replicas is over ends as failed, with
        the reason ``timeout`` (retried if it may): decided on the deadline the log's
        time gave it, so an actor started again decides the same."""
        run = self.run
        for name in sorted(run.awaiting):
            t = run.tasks[name]
            if t.session_end is None and t.due is not None and t.due <= self.now:
                t.session_end = ("failed", None, "timeout")
                run.dirty.add(name)

    def _step(self, name: str, t: TaskState, specs: dict[str, PipelineTask]) -> None:
        if t.status == "requested" and t.session_end is not None:
            outcome, code, why = t.session_end
            self._ended(name, t, "succeeded" if outcome == "succeeded" else "failed", code, why)
        if t.status == "attempt-failed":
            self._retry(name, t, specs[name])
        if t.status == "retry" and _due_now(t, self.now):
            self._request(name, t, specs[name])
        if t.status == "waiting":
            self._start(name, t, specs)

    def _blocks(self, name: str, specs: dict[str, PipelineTask]) -> bool:
        status = self.run.tasks[name].status
        return status in _BLOCKING and not (status == "failed" and specs[name].continue_on_failure)

    def _start(self, name: str, t: TaskState, specs: dict[str, PipelineTask]) -> None:
        spec = specs[name]
        deps = [self.run.tasks[d].status for d in spec.dependencies]
        if any(x not in FINAL for x in deps):
            return
        if any(self._blocks(d, specs) for d in spec.dependencies):
            self._ended(name, t, "upstream-failed", None, "a task it depends on did not succeed")
        elif spec.skip:
            self._ended(name, t, "skipped", None, "skip: true")
        else:
            self._request(name, t, spec)

    def _ended(
        self, name: str, t: TaskState, outcome: TaskOutcome, code: int | None, why: str
    ) -> None:
        end = TaskEnd(
            task=name,
            attempt=t.attempt,
            outcome=outcome,
            session_id=t.session_id if t.status == "requested" else None,
            exit_code=code,
            reason=why,
        )
        g = self._group(PipelineTasksEnded, name, t.attempt)
        note_end(self.s, self.run.run_id, self.run.round, end)
        g.ends.append(end)

    def _retry(self, name: str, t: TaskState, spec: PipelineTask) -> None:
        self._add(
            self._new(
                PipelineRetryScheduled,
                (name, t.attempt),
                run_id=self.run.run_id,
                task=name,
                round=self.run.round,
                attempt=t.attempt,
                due=after(self.now, spec.retry_delay_s),
                reason=t.reason,
            )
        )

    def _request(self, name: str, t: TaskState, spec: PipelineTask) -> None:
        attempt = t.attempt + 1
        if spec.serve is not None:
            self._serve(name, attempt, spec)
            return
        sid = self.ids.session(name, self.run.round, attempt)
        asked = TaskAttempt(task=name, attempt=attempt, session_id=sid)
        g = self._group(PipelineTasksRequested, name, attempt)
        note_attempt(self.s, self.run.run_id, self.run.round, asked, self.now)
        g.attempts.append(asked)
        request = task_request(
            self.run.spec,
            spec,
            owner=self.run.owner,
            run_id=self.run.run_id,
            session_id=sid,
            event_id=self.ids.event("session", sid),
            at=self.now,
            project=self.run.project,
            correlation_id=self.run.request_id,
            causation_id=g.id,
            folder=self.run.folder,
        )
        self.out.requests.append((subj.request(self.run.owner, sid), request))

    def _serve(self, name: str, attempt: int, spec: PipelineTask) -> None:
        """A serve task's attempt: its endpoint asked for (or a revision of the owner's
        endpoint of that name), in the owner's name, with the attempt's event."""
        run = self.run
        rid = self.ids.event("serve", name, run.round, attempt)
        asked = TaskAttempt(task=name, attempt=attempt, session_id=rid, kind="serve")
        g = self._group(PipelineTasksRequested, name, attempt)
        note_attempt(self.s, run.run_id, run.round, asked, self.now)
        g.attempts.append(asked)
        endpoint_id = "e" + self.ids.event("endpoint", name, run.round, attempt)[:20]
        command = serve_command(run.spec, spec, self.s.endpoints, run, endpoint_id)
        request = ServeRequested(
            id=rid,
            at=self.now,
            actor=ACTOR,
            causation_id=g.id,
            correlation_id=run.request_id,
            requester=run.owner,
            command=command,
        )
        self.out.requests.append((subj.request(run.owner, rid), request))

    def end(self, outcome: str, why: str) -> None:
        self._add(
            self._new(
                PipelineRunEnded,
                (),
                run_id=self.run.run_id,
                round=self.run.round,
                outcome=outcome,
                reason=why,
            )
        )
