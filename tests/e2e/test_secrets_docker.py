"""A pipeline task refers to its owner's secret and its container, on the real engine,
has the value in its environment: the agent opened it at the start. Real Docker,
in-process actors on a memory log."""

from collections.abc import AsyncIterator

import anyio
import pytest

from events import EnvVar, PipelineSpec, PipelineTask, Slots
from services.actors.bootstrap import publish_secrets_key
from services.actors.pipeline import PipelineActor
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.sealed_box import SealedBoxKey, seal
from services.adapters.system_clock import SystemClock
from services.client import Client
from tests.actors.test_pipeline import ended, until
from tests.support.cluster import agent_config, running_cluster
from tests.support.vfolder_env import engine

pytestmark = [pytest.mark.anyio, pytest.mark.docker]
AGENT = "secrets-e2e"
VALUE = "s3cr3t with spaces & $igns"


@pytest.fixture
async def runtime() -> AsyncIterator[DockerRuntime]:
    async with engine(AGENT) as rt:
        yield rt


async def test_a_tasks_container_has_its_owners_secret_in_its_environment(
    runtime: DockerRuntime,
) -> None:
    log, key = MemoryLog(), SealedBoxKey.generate()
    await publish_secrets_key(log, SystemClock(), key.public_key)
    alice = Client(log, SystemClock(), "alice")
    await alice.secret_set("hf", seal(key.public_key, VALUE))
    check = f"test \"$HF_TOKEN\" = '{VALUE}'"
    task = PipelineTask(
        name="check",
        image="fgpu/busybox:latest",
        command=("sh", "-c", check),
        slots=Slots(cpu=100, mem=64 << 20),
    )
    spec = PipelineSpec(
        name="p", environment=(EnvVar(name="HF_TOKEN", value="", secret="hf"),), tasks=(task,)
    )
    config = agent_config(AGENT)
    async with (
        running_cluster(log, [(config, runtime)], secrets=key),
        anyio.create_task_group() as tg,
    ):
        await tg.start(PipelineActor(log, SystemClock()).run)
        run_id = await alice.pipeline_run(spec)
        s = await until(log, ended(run_id), limit=120)
        tg.cancel_scope.cancel()
    run = s.runs[run_id]
    assert (run.status, run.tasks["check"].exit_code) == ("succeeded", 0), run.tasks["check"]
