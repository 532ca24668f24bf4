"""An agent restarted while its containers ran: it re-adopts the living and reports the dead.

Real Docker, real log, in-process actors: the agent is stopped (its task group cancelled),
one container is killed meanwhile, then a new agent process (a new AgentActor) starts.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from events import Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.docker_runtime import DockerRuntime, container_config
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import session_spec
from services.domain.gpu_slice import slices
from tests.support.cli_stack import docker, remove_agent_containers
from tests.support.cluster import agent_config, statuses
from tests.support.docker_env import require_docker

pytestmark = [pytest.mark.anyio, pytest.mark.docker]
AGENT = "readopt"


@pytest.fixture
async def runtime() -> AsyncIterator[DockerRuntime]:
    require_docker()
    async with DockerRuntime() as rt:
        yield rt
    remove_agent_containers(AGENT)


@asynccontextmanager
async def _scheduling(log: JetStreamLog) -> AsyncIterator[TaskGroup]:
    """Quota and scheduler running until the block ends; their task group, for agents."""
    clock = SystemClock()
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        yield tg
        tg.cancel_scope.cancel()


async def test_restarted_agent_readopts_running_and_reports_dead_containers(
    log: JetStreamLog, runtime: DockerRuntime
) -> None:
    clock = SystemClock()
    client = Client(log, clock, "alice")
    config = agent_config(AGENT, gpus=1)
    async with _scheduling(log) as tg:
        with anyio.CancelScope() as agent_scope:
            async with anyio.create_task_group() as agent_tg:
                await agent_tg.start(AgentActor(log, runtime, clock, config).run)
                ids = await client.create(
                    image="fgpu/busybox:latest",
                    slots=Slots(cpu=100, mem=64 << 20, fgpu=50),
                    command=["sleep", "3600"],
                    count=2,
                )
                with anyio.fail_after(30):
                    before = await client.wait_until(
                        lambda s: all(
                            i in s.sessions and s.sessions[i].status == "RUNNING" for i in ids
                        )
                    )
                agent_scope.cancel()  # the agent goes down; its containers keep running

        survivor, victim = ids
        docker("kill", before.sessions[victim].container_id or "")

        await tg.start(AgentActor(log, runtime, clock, config).run)
        with anyio.fail_after(30):
            s = await client.wait_until(lambda s: statuses(s, [victim]) == ["TERMINATED"])
        assert s.sessions[victim].exit_code == 137, s.sessions[victim].reason  # SIGKILL
        assert s.sessions[survivor].status == "RUNNING", (
            s.sessions[survivor].reason,
            s.sessions[survivor].exit_code,
        )
        assert s.sessions[survivor].container_id == before.sessions[survivor].container_id
        assert docker("ps", "-aq", "--filter", f"label=fgpu.session={victim}").strip() == ""
        # The re-adopted one is watched again: destroying it still works.
        await client.destroy(survivor)
        with anyio.fail_after(30):
            s = await client.wait_until(lambda s: statuses(s, [survivor]) == ["TERMINATED"])
        assert s.agents[AGENT].allocated.fgpu == 0


async def test_a_container_created_and_never_started_is_started_not_taken_for_ended(
    log: JetStreamLog, runtime: DockerRuntime
) -> None:
    # The agent stopped between the engine's create and start: the container is there,
    # never started. Waiting on it would answer at once, exit 0, as if the command had run.
    clock = SystemClock()
    client = Client(log, clock, "alice")
    config = agent_config(AGENT, gpus=1)
    async with _scheduling(log) as tg:
        with anyio.CancelScope() as agent_scope:
            async with anyio.create_task_group() as agent_tg:
                await agent_tg.start(AgentActor(log, runtime, clock, config).run)
                with anyio.fail_after(30):
                    await client.wait_until(lambda s: AGENT in s.agents)
                agent_scope.cancel()  # registered, then down
        [sid] = await client.create(
            image="fgpu/busybox:latest",
            slots=Slots(cpu=100, mem=64 << 20, fgpu=50),
            command=["sleep", "3600"],
        )
        with anyio.fail_after(30):
            s = await client.wait_until(lambda s: statuses(s, [sid]) == ["SCHEDULED"])
        v = s.sessions[sid]
        gpus = {g.index: g for g in config.gpus}
        spec = session_spec(
            v,
            AGENT,
            slices(v.devices, gpus, config.fgpu_per_gpu),
            request_devices=False,
            log_identity=await log.identity(),
        )
        body = container_config(spec)
        created = docker("create", "--name", spec.name, *_labels(body), body["Image"], *body["Cmd"])

        await tg.start(AgentActor(log, runtime, clock, config).run)
        with anyio.fail_after(30):
            s = await client.wait_until(lambda s: statuses(s, [sid]) == ["RUNNING"])
        assert s.sessions[sid].container_id == created.strip()
        assert (
            docker("inspect", "--format", "{{.State.Running}}", created.strip()).strip() == "true"
        )


def _labels(body: dict[str, Any]) -> list[str]:
    return [arg for k, v in body["Labels"].items() for arg in ("--label", f"{k}={v}")]
