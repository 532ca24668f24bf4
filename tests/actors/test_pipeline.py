"""The pipeline actor on a real nats-server with the registrar, quota, scheduler and a
dummy agent: each task asked for once per attempt across abrupt stops, retries after
their due time, fan-out and fan-in, cancel, failures with and without
continue_on_failure, requests of others refused."""

from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager

import anyio
import pytest

from events import (
    PipelineRequestRefused,
    PipelineSpec,
    PipelineTask,
    PipelineTaskRequested,
    PipelineTasksRequested,
    SessionRequested,
    Slots,
)
from services.actors.pipeline import PipelineActor
from services.actors.snapshots import StateSnapshots
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.adapters.virtual_clock import VirtualClock
from services.client import Client
from services.domain.pipelines.runs import PipelineState, Run, fold
from services.ports import Clock, EventLog
from tests.support.cluster import agent_config, running_cluster

pytestmark = pytest.mark.anyio

IMAGE = "fgpu/busybox:latest"
SMALL = Slots(cpu=100, mem=64 << 20)


def task(name: str, command: str = "true", *deps: str, **more: object) -> PipelineTask:
    return PipelineTask(
        name=name,
        image=IMAGE,
        command=("sh", "-c", command),
        slots=SMALL,
        dependencies=deps,
        **more,  # type: ignore[arg-type]
    )


def spec(*tasks: PipelineTask) -> PipelineSpec:
    return PipelineSpec(name="p", tasks=tasks)


@asynccontextmanager
async def cluster(log: EventLog) -> AsyncIterator[None]:
    async with running_cluster(log, [(agent_config("a1"), DummyRuntime())]):
        yield


@asynccontextmanager
async def actor(
    log: EventLog,
    clock: Clock | None = None,
    snapshots: StateSnapshots[PipelineState] | None = None,
) -> AsyncIterator[PipelineActor]:
    """A pipeline actor running until the block ends, then stopped abruptly (its task
    cancelled wherever it is, as a kill would)."""
    a = PipelineActor(log, clock or SystemClock(), max_wait_s=0.05, snapshots=snapshots)
    async with anyio.create_task_group() as tg:
        await tg.start(a.run)
        yield a
        tg.cancel_scope.cancel()


async def until(
    log: EventLog, ok: Callable[[PipelineState], bool], limit: float = 30
) -> PipelineState:
    """The runs as folded from the log once ``ok`` holds (awaited record by record)."""
    s = PipelineState()
    with anyio.fail_after(limit):
        async with aclosing(log.tail(0)) as batches:
            async for batch in batches:
                fold(batch, s)
                if ok(s):
                    return s
    raise AssertionError("unreachable")


def ended(run_id: str) -> Callable[[PipelineState], bool]:
    return lambda s: run_id in s.runs and s.runs[run_id].ended


def statuses(run: Run) -> dict[str, str]:
    return {n: t.status for n, t in run.tasks.items()}


async def asked(log: EventLog, run_id: str) -> tuple[Counter[tuple[str, int, int]], int]:
    """Each (task, round, attempt) asked for, how many times; and the sessions asked for
    by the pipeline (all of them: every request on the log, stored however often)."""
    tasks: Counter[tuple[str, int, int]] = Counter()
    sessions = 0
    async for batch in log.read(0):
        for r in batch:
            e = r.event
            if isinstance(e, PipelineTaskRequested) and e.run_id == run_id:
                tasks[(e.task, e.round, e.attempt)] += 1
            if isinstance(e, PipelineTasksRequested) and e.run_id == run_id:
                tasks.update((a.task, e.round, a.attempt) for a in e.tasks)
            if isinstance(e, SessionRequested) and e.actor == "pipeline":
                sessions += 1
    return tasks, sessions


async def test_a_chain_runs_in_order_once_each(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    async with cluster(log), actor(log):
        run_id = await alice.pipeline_run(
            spec(task("a"), task("b", "echo b", "a"), task("c", "true", "b"))
        )
        s = await until(log, ended(run_id))
    run = s.runs[run_id]
    assert run.status == "succeeded"
    assert statuses(run) == {"a": "succeeded", "b": "succeeded", "c": "succeeded"}
    tasks, sessions = await asked(log, run_id)
    assert tasks == {("a", 0, 1): 1, ("b", 0, 1): 1, ("c", 0, 1): 1} and sessions == 3


async def test_stopped_between_a_tasks_end_and_its_dependents_nothing_is_lost_or_doubled(
    log: JetStreamLog,
) -> None:
    """The actor is stopped once a's session is asked for; a ends while no actor runs;
    the next one asks for b and c exactly once."""
    alice = Client(log, SystemClock(), "alice")
    async with cluster(log):
        async with actor(log):
            run_id = await alice.pipeline_run(
                spec(task("a"), task("b", "true", "a"), task("c", "true", "a"))
            )
            s = await until(
                log, lambda s: run_id in s.runs and s.runs[run_id].tasks["a"].session_id is not None
            )
        sid = s.runs[run_id].tasks["a"].session_id
        s = await until(
            log, lambda s: run_id in s.runs and s.runs[run_id].tasks["a"].session_end is not None
        )
        assert statuses(s.runs[run_id]) == {"a": "requested", "b": "waiting", "c": "waiting"}
        async with actor(log):
            s = await until(log, ended(run_id))
    assert s.runs[run_id].status == "succeeded" and sid is not None
    tasks, sessions = await asked(log, run_id)
    assert tasks == {("a", 0, 1): 1, ("b", 0, 1): 1, ("c", 0, 1): 1} and sessions == 3


async def test_stopped_again_and_again_every_task_is_asked_for_once(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    layers = [task("root")] + [task(f"m{i}", "true", "root") for i in range(6)]
    layers.append(task("sink", "true", *(f"m{i}" for i in range(6))))
    async with cluster(log):
        run_id = await alice.pipeline_run(spec(*layers))
        for stop_after in [0.0, 0.01, 0.05, 0.1, 0.02, 0.2] * 10:
            async with actor(log):
                await anyio.sleep(stop_after)  # stopped wherever it is then
            s = await until(log, lambda s: run_id in s.runs)
            if s.runs[run_id].ended:
                break
        async with actor(log):
            s = await until(log, ended(run_id))
    assert s.runs[run_id].status == "succeeded"
    tasks, sessions = await asked(log, run_id)
    assert set(tasks.values()) == {1} and len(tasks) == 8 and sessions == 8


async def test_a_retry_waits_its_delay_on_the_log_across_a_stop(log: JetStreamLog) -> None:
    """Attempt 1 fails; the retry is due 60 s later (a virtual clock): a stopped actor's
    successor asks for attempt 2 only once it is due, and once."""
    alice = Client(log, SystemClock(), "alice")
    clock = VirtualClock(start=SystemClock().now())
    flaky = task("flaky", "exit 3", retry_max_attempts=2, retry_delay_s=60)
    async with cluster(log):
        async with actor(log, clock):
            run_id = await alice.pipeline_run(spec(flaky))
            s = await until(
                log, lambda s: run_id in s.runs and s.runs[run_id].tasks["flaky"].status == "retry"
            )
        t = s.runs[run_id].tasks["flaky"]
        assert t.due is not None and (t.due - clock.now()).total_seconds() == pytest.approx(
            60, abs=1
        )
        async with actor(log, clock) as a:
            clock.advance(30)
            a.poke()
            tasks, _ = await asked(log, run_id)
            assert tasks == {("flaky", 0, 1): 1}  # not due yet
            clock.advance(31)
            a.poke()
            s = await until(log, ended(run_id))
    assert s.runs[run_id].status == "failed"
    assert s.runs[run_id].tasks["flaky"].exit_code == 3
    tasks, sessions = await asked(log, run_id)
    assert tasks == {("flaky", 0, 1): 1, ("flaky", 0, 2): 1} and sessions == 2


async def test_each_attempt_is_asked_for_once_up_to_max_attempts(log: JetStreamLog) -> None:
    """Each attempt its own session, asked for once; after the last, the run fails and
    what depends on the task is not run."""
    alice = Client(log, SystemClock(), "alice")
    clock = VirtualClock(start=SystemClock().now())
    async with cluster(log), actor(log, clock) as a:
        run_id = await alice.pipeline_run(
            spec(task("x", "exit 1", retry_max_attempts=3, retry_delay_s=5), task("y", "true", "x"))
        )
        await until(log, lambda s: run_id in s.runs and s.runs[run_id].tasks["x"].status == "retry")
        clock.advance(5)
        a.poke()
        await until(
            log,
            lambda s: (
                run_id in s.runs
                and s.runs[run_id].tasks["x"].attempt == 2
                and s.runs[run_id].tasks["x"].status == "retry"
            ),
        )
        clock.advance(5)
        a.poke()
        s = await until(log, ended(run_id))
    run = s.runs[run_id]
    assert run.status == "failed" and statuses(run) == {"x": "failed", "y": "upstream-failed"}
    tasks, _ = await asked(log, run_id)
    assert tasks == {("x", 0, 1): 1, ("x", 0, 2): 1, ("x", 0, 3): 1}


@pytest.mark.slow
async def test_fan_out_and_fan_in_of_200(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    middle = [task(f"m{i}", "true", "root") for i in range(200)]
    sink = task("sink", "true", *(t.name for t in middle))
    async with cluster(log), actor(log):
        run_id = await alice.pipeline_run(spec(task("root"), *middle, sink))
        s = await until(log, ended(run_id), limit=120)
    assert s.runs[run_id].status == "succeeded"
    tasks, sessions = await asked(log, run_id)
    assert len(tasks) == 202 and set(tasks.values()) == {1} and sessions == 202


async def test_a_failure_stops_its_dependents_unless_it_may_fail(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    async with cluster(log), actor(log):
        stop = await alice.pipeline_run(
            spec(task("bad", "exit 2"), task("after", "true", "bad"), task("other"))
        )
        go = await alice.pipeline_run(
            spec(task("bad", "exit 2", continue_on_failure=True), task("after", "true", "bad"))
        )
        s = await until(log, lambda s: ended(stop)(s) and ended(go)(s))
    assert s.runs[stop].status == "failed" and s.runs[stop].reason == "task bad failed"
    assert statuses(s.runs[stop]) == {
        "bad": "failed",
        "after": "upstream-failed",
        "other": "succeeded",
    }
    assert s.runs[go].status == "succeeded"
    assert statuses(s.runs[go]) == {"bad": "failed", "after": "succeeded"}


async def test_skipped_tasks_count_as_done(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    async with cluster(log), actor(log):
        run_id = await alice.pipeline_run(spec(task("a", skip=True), task("b", "true", "a")))
        s = await until(log, ended(run_id))
    assert statuses(s.runs[run_id]) == {"a": "skipped", "b": "succeeded"}
    assert set((await asked(log, run_id))[0]) == {("b", 0, 1)}


async def test_cancel_while_tasks_run_ends_them_and_asks_for_nothing_more(
    log: JetStreamLog,
) -> None:
    alice = Client(log, SystemClock(), "alice")
    async with cluster(log), actor(log):
        run_id = await alice.pipeline_run(
            spec(
                task("long1", "sleep 600"),
                task("long2", "sleep 600"),
                task("next", "true", "long1"),
            )
        )
        await until(
            log,
            lambda s: (
                run_id in s.runs
                and all(s.runs[run_id].tasks[n].running for n in ("long1", "long2"))
            ),
        )
        await alice.pipeline_cancel(run_id)
        s = await until(log, ended(run_id))
    run = s.runs[run_id]
    assert run.status == "cancelled"
    assert statuses(run) == {"long1": "cancelled", "long2": "cancelled", "next": "cancelled"}
    assert set((await asked(log, run_id))[0]) == {("long1", 0, 1), ("long2", 0, 1)}


async def test_another_user_cannot_cancel_or_rerun_a_run(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    bob = Client(log, SystemClock(), "bob")
    async with cluster(log), actor(log):
        run_id = await alice.pipeline_run(spec(task("slow", "sleep 1"), task("b", "true", "slow")))
        await bob.pipeline_cancel(run_id)
        s = await until(log, ended(run_id))
        await bob.pipeline_rerun(run_id, "b")
        await bob.pipeline_cancel("pnothere")
        refusals = await _refusals(log, 3)
    assert s.runs[run_id].status == "succeeded"  # bob's cancel changed nothing
    assert {(r.requester, r.reason) for r in refusals} == {
        ("bob", f"no run {run_id} of yours"),
        ("bob", "no run pnothere of yours"),
    }


async def test_rerun_from_a_task_runs_it_and_what_follows_again(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    async with cluster(log), actor(log):
        run_id = await alice.pipeline_run(
            spec(task("a"), task("b", "true", "a"), task("c", "true", "b"))
        )
        await until(log, ended(run_id))
        await alice.pipeline_rerun(run_id, "b")
        s = await until(
            log, lambda s: run_id in s.runs and s.runs[run_id].round == 1 and s.runs[run_id].ended
        )
    assert s.runs[run_id].status == "succeeded"
    tasks, _ = await asked(log, run_id)
    assert tasks == {("a", 0, 1): 1, ("b", 0, 1): 1, ("c", 0, 1): 1, ("b", 1, 1): 1, ("c", 1, 1): 1}


async def test_a_spec_that_cannot_run_is_refused_on_the_log(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    async with cluster(log), actor(log):
        run_id = await alice.pipeline_run(spec(task("a", "true", "b"), task("b", "true", "a")))
        s = await until(log, ended(run_id))
    assert s.runs[run_id].status == "refused"
    assert s.runs[run_id].reason.startswith("tasks: a cycle")
    assert (await asked(log, run_id))[1] == 0


async def _refusals(log: EventLog, n: int) -> list[PipelineRequestRefused]:
    found: list[PipelineRequestRefused] = []
    with anyio.fail_after(20):
        async with aclosing(log.tail(0)) as batches:
            async for batch in batches:
                found += [r.event for r in batch if isinstance(r.event, PipelineRequestRefused)]
                if len(found) >= n:
                    return found
    return found
