"""The agent's GPU watch tells sessions apart by their real containers (issue 19, item 2).

NVML reports host pids. Real Docker, a real log, the agent with its real cgroup reader
(``CgroupContainers``); the driver's figures are ``FakeGpuWatch``'s, naming the host pids
of real containers' processes. The session whose process holds more than its slice is
stopped, with ``gpu.over-slice``; a session at its slice and a host process holding a lot
(in no container) are left alone.
"""

import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace

import aiodocker
import anyio
import pytest

from events import GpuOverSlice, Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.proc_cgroups import CgroupContainers
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.gpu_watch import WatchSettings
from services.testing import FakeGpuWatch
from tests.support.cli_stack import remove_agent_containers
from tests.support.cluster import GIB, agent_config, statuses
from tests.support.docker_env import require_docker

pytestmark = [pytest.mark.anyio, pytest.mark.docker]
AGENT = "watchdog"
LIMIT = 4 * GIB  # 0.5 fGPU of a 16 GiB GPU at 2 fGPU per GPU


@pytest.fixture
async def runtime() -> AsyncIterator[DockerRuntime]:
    """The engine, and no container of this test's agent left after it."""
    require_docker()
    try:
        async with DockerRuntime() as rt:
            yield rt
    finally:
        remove_agent_containers(AGENT)


async def host_pid(container_id: str) -> int:
    """The host pid of the container's first process (as NVML would name it)."""
    async with aiodocker.Docker() as docker:
        info = await docker.containers.get(container_id)
        return int(info["State"]["Pid"])


async def test_the_session_whose_container_holds_too_much_is_stopped(
    log: JetStreamLog, runtime: DockerRuntime
) -> None:
    clock = SystemClock()
    client = Client(log, clock, "alice")
    driver = FakeGpuWatch()
    config = replace(agent_config(AGENT), watch=WatchSettings(interval_s=0.2))
    agent = AgentActor(log, runtime, clock, config, gpu_watch=driver, containers=CgroupContainers())
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(agent.run)
        greedy, modest = await client.create(
            image="fgpu/busybox:latest",
            slots=Slots(cpu=100, mem=64 << 20, fgpu=50),
            command=["sleep", "3600"],
            count=2,
        )
        with anyio.fail_after(30):
            s = await client.wait_until(lambda s: statuses(s, [greedy, modest]) == ["RUNNING"] * 2)
        greedy_pid = await host_pid(s.sessions[greedy].container_id or "")
        modest_pid = await host_pid(s.sessions[modest].container_id or "")
        after = await log.last_seq()
        driver.hold(0, modest_pid, LIMIT)  # its whole slice: allowed
        driver.hold(0, os.getpid(), 60 * GIB)  # a host process, in no container
        driver.hold(0, greedy_pid, LIMIT + 2 * GIB)  # the real driver, loaded by path
        with anyio.fail_after(30):
            over = await first_over_slice(log, after)
            s = await client.wait_until(lambda s: statuses(s, [greedy]) == ["TERMINATED"])
        assert statuses(s, [modest]) == ["RUNNING"]
        await client.destroy(modest)
        with anyio.fail_after(30):
            await client.wait_until(lambda s: statuses(s, [modest]) == ["TERMINATED"])
        tg.cancel_scope.cancel()
    assert (over.session_id, over.pids, over.held, over.mem_limit) == (
        greedy,
        (greedy_pid,),
        LIMIT + 2 * GIB,
        LIMIT,
    )
    assert (s.sessions[greedy].reason or "").startswith("stopped by the agent: its processes held")


async def first_over_slice(log: JetStreamLog, after: int) -> GpuOverSlice:
    async with aclosing(log.tail(after)) as batches:
        async for batch in batches:
            for r in batch:
                if isinstance(r.event, GpuOverSlice):
                    return r.event
    raise AssertionError("the log ended")
