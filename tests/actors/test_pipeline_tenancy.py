"""Pipelines on a cluster with tenancy: each task's session is admitted against its
owner's rights as they stand when its turn comes."""

from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from events import (
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
from services.client import Client
from tests.actors.test_pipeline import ended, statuses, until
from tests.support.cluster import agent_config, running_cluster
from tests.support.tenants import Tenants, tenants

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
