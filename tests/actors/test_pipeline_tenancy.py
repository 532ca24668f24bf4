"""Pipelines on a cluster with tenancy: each task's session is admitted against its
owner's rights as they stand when its turn comes."""

import anyio
import pytest

from events import (
    PipelineSpec,
    PipelineTask,
    PolicyLevel,
    ResourcePolicy,
    RevokeKeypair,
    SetPolicy,
    Slots,
)
from services.actors.pipeline import PipelineActor
from services.adapters.system_clock import SystemClock
from tests.actors.test_pipeline import ended, statuses, until
from tests.support.tenants import tenants

pytestmark = pytest.mark.anyio

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
