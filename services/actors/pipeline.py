"""The pipeline actor: folds runs from the log (``services.domain.pipelines.runs``) and
appends what each run needs next (``decide``): its tasks' session requests, their ends,
retries, cancels, the run's end.

Exactly once per attempt, across crashes and restarts: a task's attempt is asked for by
one atomic batch holding ``pipeline.tasks-requested`` and the ``session.requested`` events
it names (the attempts one decision freed: a fan-out is one event and its requests),
expecting the run subject's last sequence; every id in it is derived from the run, task,
round and attempt (``requests.RunIds``), so a batch sent again is refused
whole, and an actor that starts again folds what the log holds and asks for nothing it
holds already. A retry's due time is on the log (``pipeline.retry-scheduled``); the
wait for it in memory is only a timer, remade from the log at every start.

With ``snapshots`` it starts from the latest usable snapshot of its state and the log
after it, and keeps one as the scheduler and quota do (``actors.snapshots``): taken
between two decisions, once every decision it applied ahead of the log has come back.

The sessions are asked for in the owner's name: the quota actor admits each against the
owner's rights as they stand then (a revoked key's tasks are rejected, and the run fails).
"""

import hashlib
from collections.abc import Sequence
from contextlib import aclosing
from datetime import datetime

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from events import AnyEvent
from events import subjects as subj
from services.actors.snapshots import StateSnapshots
from services.domain.pipelines.decide import (
    ACTOR,
    Decisions,
    decide,
    next_due,
    refuse_orphan,
)
from services.domain.pipelines.runs import PipelineState, Run, fold
from services.domain.pipelines.scheduled import decide_schedule
from services.domain.pipelines.schedules import next_time
from services.ports import MAX_BATCH, Clock, EventLog, LogError

__all__ = ["PipelineActor"]

log = structlog.get_logger()


class PipelineActor:
    """Decides for every run on the log, for ever (``run``). ``max_wait_s``: the longest
    the timer of due retries sleeps before it looks at the clock again (a clock that is
    not the machine's moves on its own); ``poke`` wakes it at once."""

    NAME = ACTOR

    def __init__(
        self,
        events: EventLog,
        clock: Clock,
        *,
        durable: str = ACTOR,
        max_wait_s: float = 1.0,
        snapshots: StateSnapshots[PipelineState] | None = None,
    ) -> None:
        self.events = events
        self.snapshots = snapshots
        self.clock = clock
        self.durable = durable
        self.max_wait_s = max_wait_s
        self._salt: str | None = None
        self._lock = anyio.Lock()
        self._poked = anyio.Event()
        self._fresh: set[str] = set()  # runs not yet decided since the last rebuild

    def poke(self) -> None:
        """Look at the due retries now (a test's virtual clock moved)."""
        self._poked.set()

    async def run(
        self, *, task_status: TaskStatus[PipelineState] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Rebuild from the log, then decide after every batch and at every due time;
        on a failure of the log, rebuild and go on. Started once first rebuilt."""
        started = False
        backoff = 0.05
        while True:
            try:
                state = await self._rebuild()
                if not started:
                    task_status.started(state)
                    started = True
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._timer, state, tg)
                    await self._follow(state, tg)
            except* LogError as group:
                log.warning("actor.rebuild", actor=self.durable, error=str(group.exceptions[0]))
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _rebuild(self) -> PipelineState:
        if self._salt is None:
            # The same for every pipeline actor of this log, unknown to its users: ids
            # they could guess they could take first.
            identity = await self.events.identity()
            self._salt = hashlib.sha256(f"pipeline\0{identity}".encode()).hexdigest()[:32]
        state = PipelineState()
        if self.snapshots is not None:
            state = await self.snapshots.start(self.events, self.durable)
        async for batch in self.events.read(state.last_seq):
            fold(batch, state)
        state.changed.update(state.runs)  # every run is looked at once after a start
        self._fresh = set(state.runs)
        return state

    async def _follow(self, state: PipelineState, tg: TaskGroup) -> None:
        await self._react(state, tg)
        async with aclosing(self.events.follow(self.durable, after=state.last_seq)) as batches:
            async for batch in batches:
                fold(batch, state)
                await self._react(state, tg)

    async def _timer(self, state: PipelineState, tg: TaskGroup) -> None:
        while True:
            due = [d for r in state.runs.values() if (d := next_due(r)) is not None]
            due += [
                next_time(sc.cron, sc.last)
                for sc in state.schedules.values()
                if not sc.removed and sc.refusal is None
            ]
            wait = self.max_wait_s
            if due:
                wait = max(0.0, min(wait, (min(due) - self.clock.now()).total_seconds()))
            with anyio.move_on_after(wait):
                await self._poked.wait()
            self._poked = anyio.Event()
            now = self.clock.now()
            state.changed.update(r.run_id for r in state.runs.values() if _due(r, now))
            await self._react(state, tg)  # schedules due too: cheap when nothing is

    async def _react(self, state: PipelineState, tg: TaskGroup) -> None:
        async with self._lock:
            assert self._salt is not None
            # Under the lock: no decision is applied and not yet appended (``settled``
            # tells those appended and not yet folded).
            if self.snapshots is not None:
                self.snapshots.keep(state, tg, self.durable)
            await self._refuse_orphans(state)
            await self._schedules(state)
            now = self.clock.now()
            fresh = self._fresh
            while state.changed:
                run = state.runs[state.changed.pop()]
                d = decide(state, run, self._salt, now, resend=run.run_id in fresh)
                fresh.discard(run.run_id)
                if d:
                    await self._append(state, run.run_id, d)

    async def _refuse_orphans(self, state: PipelineState) -> None:
        """Requests about runs (or schedules) the log does not hold get their refusal."""
        assert self._salt is not None
        for r in list(state.orphans):
            e = refuse_orphan(state, r, self._salt, self.clock.now())
            subject = subj.pipeline_run(e.run_id)
            await self._batch(state, subject, [(subject, e)], 0)

    async def _schedules(self, state: PipelineState) -> None:
        """Each schedule's refusal, or its time come: its run asked for, or refused."""
        assert self._salt is not None
        now = self.clock.now()
        for sched in list(state.schedules.values()):
            items = decide_schedule(state, sched, self._salt, now)
            if items:
                subject = subj.pipeline_run(sched.schedule_id)
                await self._batch(state, subject, items, len(items) - 1)

    async def _append(self, state: PipelineState, run_id: str, d: Decisions) -> None:
        """``d`` as atomic batches expecting the run's subject: each of the run's events
        with the requests it names, in one batch. Requests alone (destroys sent again
        after a restart) go as they are: each is deduped, and one for a session that
        ended is refused, harmlessly."""
        subject = subj.pipeline_run(run_id)
        if not d.run:
            await self.events.append_many(d.requests)
            return
        units = _units(d)
        chunk: list[tuple[str, AnyEvent]] = []
        requests: list[tuple[str, AnyEvent]] = []
        for own, named in units:
            if chunk and len(chunk) + len(requests) + 1 + len(named) > MAX_BATCH:
                await self._batch(state, subject, chunk + requests, len(requests))
                chunk, requests = [], []
            chunk.append(own)
            requests += named
        if chunk:
            await self._batch(state, subject, chunk + requests, len(requests))

    async def _batch(
        self,
        state: PipelineState,
        subject: str,
        items: Sequence[tuple[str, AnyEvent]],
        after_own: int,
    ) -> None:
        last = await self.events.append_batch(
            items,
            expect_subject=subject,
            expected_last_subject_seq=state.subject_seq.get(subject, 0),
        )
        # The run's own events are stored first (a batch is stored in one piece, in order).
        own_last = last - after_own
        if own_last > state.subject_seq.get(subject, 0):
            state.subject_seq[subject] = own_last
        state.ahead = max(state.ahead, last)


def _due(run: Run, now: datetime) -> bool:
    due = next_due(run)
    return due is not None and due <= now


def _units(d: Decisions) -> list[tuple[tuple[str, AnyEvent], list[tuple[str, AnyEvent]]]]:
    """Each of the run's events with the requests it names (a task's session request
    with its ``tasks-requested``; destroys with the cancel)."""
    by_cause: dict[str, list[tuple[str, AnyEvent]]] = {}
    loose: list[tuple[str, AnyEvent]] = []
    for item in d.requests:
        cause = item[1].causation_id
        (by_cause.setdefault(cause, []) if cause is not None else loose).append(item)
    units = [(own, by_cause.pop(own[1].id, [])) for own in d.run]
    rest = [i for named in by_cause.values() for i in named] + loose
    if rest and units:
        last_own, last_named = units[-1]
        units[-1] = (last_own, last_named + rest)
    return units
