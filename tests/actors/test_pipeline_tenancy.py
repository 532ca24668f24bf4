"""Pipelines on a cluster with tenancy: each task's session is admitted against its
owner's rights as they stand when its turn comes."""

from contextlib import aclosing
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from events import (
    Event,
    PipelineRequestRefused,
    PipelineRunRequested,
    PipelineScheduleFired,
    PipelineScheduleRefused,
    PipelineSpec,
    PipelineTask,
    PolicyLevel,
    ResourcePolicy,
    RevokeKeypair,
    SessionRequested,
    SetPolicy,
    Slots,
    VfolderMount,
)
from services.actors.bootstrap import bootstrap
from services.actors.pipeline import PipelineActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.adapters.virtual_clock import VirtualClock
from services.client import Client
from services.domain.pipelines.schedules import cron_problem
from tests.actors.test_pipeline import ended, statuses, until
from tests.support.cluster import agent_config, running_cluster
from tests.support.tenants import Tenants, tenants

pytestmark = pytest.mark.anyio
E = TypeVar("E", bound=Event)

TASK = PipelineTask(
    name="a", image="fgpu/busybox:latest", command=("true",), slots=Slots(cpu=100, mem=1 << 26)
)


async def test_a_revoked_owners_tasks_are_refused_and_the_run_fails() -> None:
    async with tenants() as t:
        await t.people()
        run_id = await t.client("AKuma").pipeline_run(PipelineSpec(name="p", tasks=(TASK,)))
        await t.applied(t.root, RevokeKeypair(access_key="AKuma"))
        async with anyio.create_task_group() as tg:
            await tg.start(PipelineActor(t.log, SystemClock()).run)
            s = await until(t.log, ended(run_id))
            tg.cancel_scope.cancel()
    run = s.runs[run_id]
    assert run.status == "failed" and statuses(run) == {"a": "failed"}
    assert run.tasks["a"].reason == "access key AKuma is unknown or revoked"


async def test_a_task_over_its_owners_policy_fails_with_the_quota_actors_reason() -> None:
    async with tenants() as t:
        await t.people()
        limit = ResourcePolicy(total_slots=Slots(cpu=50, mem=1 << 30, fgpu=100))
        await t.applied(t.root, SetPolicy(level=PolicyLevel.USER, target="uma", policy=limit))
        run_id = await t.client("AKuma").pipeline_run(PipelineSpec(name="p", tasks=(TASK,)))
        async with anyio.create_task_group() as tg:
            await tg.start(PipelineActor(t.log, SystemClock()).run)
            s = await until(t.log, ended(run_id))
            tg.cancel_scope.cancel()
    assert s.runs[run_id].tasks["a"].reason.startswith("user policy (uma) allows")


async def test_a_runs_folder_is_made_before_its_tasks_and_mounted_at_pipeline(
    tmp_path: Path,
) -> None:
    """The folder asked for with the run (as the user's) is made by the registrar first;
    each task's session mounts it at /pipeline, and the agent makes it under its root."""
    log = MemoryLog()
    first = await bootstrap(log, SystemClock())
    assert first is not None
    config = replace(agent_config("a1"), vfolder_root=str(tmp_path))
    t = Tenants(log, Client(log, SystemClock(), first.access_key))
    async with running_cluster(log, [(config, DummyRuntime())]):
        await t.people()
        chain = (TASK, PipelineTask(**{**_fields(TASK), "name": "b", "dependencies": ("a",)}))
        uma = t.client("AKuma")
        run_id = await uma.pipeline_run(PipelineSpec(name="p", tasks=chain), folder_of="uma")
        async with anyio.create_task_group() as tg:
            await tg.start(PipelineActor(log, SystemClock()).run)
            s = await until(log, ended(run_id))
            tg.cancel_scope.cancel()
        state = await uma.state()
    assert s.runs[run_id].status == "succeeded"
    folder = state.tenancy.vfolders[run_id]
    assert (folder.name, folder.user) == (f"pipeline-{run_id}", "uma")
    mounts = [
        r.event.mounts
        async for batch in log.read(0)
        for r in batch
        if isinstance(r.event, SessionRequested) and r.event.actor == "pipeline"
    ]
    assert mounts == [(VfolderMount(name=run_id, at="/pipeline"),)] * 2
    assert (tmp_path / folder.host / run_id).is_dir()


async def test_a_folder_the_registrar_refuses_refuses_the_run() -> None:
    async with tenants() as t:
        await t.people()
        run_id = await t.client("AKuma").pipeline_run(
            PipelineSpec(name="p", tasks=(TASK,)),
            folder_of="vic",  # not uma's to make
        )
        async with anyio.create_task_group() as tg:
            await tg.start(PipelineActor(t.log, SystemClock()).run)
            s = await until(t.log, ended(run_id))
            tg.cancel_scope.cancel()
    run = s.runs[run_id]
    assert run.status == "refused" and run.reason.startswith("its folder could not be made:")
    assert statuses(run) == {"a": "waiting"}


def _fields(task: PipelineTask) -> dict[str, object]:
    return {f: getattr(task, f) for f in task.__struct_fields__}


async def _first(log: MemoryLog, kind: type[E], after: int = 0) -> E:
    with anyio.fail_after(20):
        async with aclosing(log.tail(after)) as batches:
            async for batch in batches:
                for r in batch:
                    if isinstance(r.event, kind):
                        return r.event
    raise AssertionError("the log ended")


async def test_a_schedule_runs_as_its_owner_until_the_owner_is_revoked() -> None:
    """Each time due fires one run of the owner's; once the owner's key is revoked the
    next time is refused with an event, and no run is asked for. Another user may not
    remove the schedule."""
    clock = VirtualClock(start=datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC))
    async with tenants() as t:
        await t.people()
        uma = Client(t.log, clock, "AKuma")
        schedule = await uma.pipeline_schedule(PipelineSpec(name="p", tasks=(TASK,)), "* * * * *")
        actor = PipelineActor(t.log, clock, max_wait_s=0.05)
        async with anyio.create_task_group() as tg:
            await tg.start(actor.run)
            clock.advance(60)  # 00:01:30: the time 00:01 is due
            actor.poke()
            fired = await _first(t.log, PipelineScheduleFired)
            assert (fired.owner, fired.due) == ("AKuma", datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
            s = await until(t.log, ended(fired.run_id))
            assert s.runs[fired.run_id].status == "succeeded"
            assert s.runs[fired.run_id].owner == "AKuma"
            await Client(t.log, clock, "AKvic").pipeline_unschedule(schedule)
            refused_removal = await _first(t.log, PipelineRequestRefused)
            assert refused_removal.reason == f"no schedule {schedule} of yours"
            await t.applied(t.root, RevokeKeypair(access_key="AKuma"))
            seq = await t.log.last_seq()
            clock.advance(60)
            actor.poke()
            refused = await _first(t.log, PipelineScheduleRefused, seq)
            tg.cancel_scope.cancel()
    assert refused.reason == "access key AKuma is revoked"
    assert refused.due == datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
    runs = [
        r.event
        async for batch in t.log.read(0)
        for r in batch
        if isinstance(r.event, PipelineRunRequested)
    ]
    assert [e.run_id for e in runs] == [fired.run_id]  # one run: the refused time made none


def test_a_bad_cron_is_one_line() -> None:
    assert cron_problem("*/5 * * * *") is None
    assert cron_problem("61 * * * *") == (
        "cron '61 * * * *': five fields, minute hour day-of-month month day-of-week"
    )
    assert cron_problem("* * * *") is not None
