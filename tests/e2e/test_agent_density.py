"""An agent with more live containers than its engine client has connections still starts
the next session and ends one on request.

Real Docker, real log, in-process actors. The runtime's pool of connections for plain
calls is made small (``pool_size``), so a handful of containers stands for the hundreds an
agent holds (the default pool is 100): a wait for each container's exit must not hold one
of those connections, nor a stop wait behind them.
"""

from collections.abc import AsyncIterator

import anyio
import pytest

from events import Slots
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from tests.support.cli_stack import remove_agent_containers
from tests.support.cluster import agent_config, running_cluster, statuses
from tests.support.docker_env import require_docker

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.slow]
AGENT = "density"
POOL = 4  # connections of the runtime's plain calls
LIVE = POOL + 2  # sessions running before the one that must still start
SLOTS = Slots(cpu=100, mem=64 << 20, fgpu=1)
START_ALL_S = 90.0  # the LIVE sessions, started at once by an engine on a loaded host
EACH_S = 20.0  # one more start, one removal: generous next to a second or two


@pytest.fixture
async def runtime() -> AsyncIterator[DockerRuntime]:
    require_docker()
    async with DockerRuntime(pool_size=POOL) as rt:
        yield rt
    remove_agent_containers(AGENT)


async def test_next_session_starts_and_one_ends_past_the_pool(
    log: JetStreamLog, runtime: DockerRuntime
) -> None:
    client = Client(log, SystemClock(), "alice")
    sleep = ["sleep", "3600"]
    async with running_cluster(log, [(agent_config(AGENT, gpus=1), runtime)]):
        live = await client.create(
            image="fgpu/busybox:latest", slots=SLOTS, command=sleep, count=LIVE
        )
        with anyio.fail_after(START_ALL_S):
            await client.wait_until(lambda s: set(statuses(s, live)) == {"RUNNING"})

        [more] = await client.create(image="fgpu/busybox:latest", slots=SLOTS, command=sleep)
        with anyio.fail_after(EACH_S):
            await client.wait_until(lambda s: statuses(s, [more]) == ["RUNNING"])

        await client.destroy(live[0])
        with anyio.fail_after(EACH_S):
            s = await client.wait_until(lambda s: statuses(s, [live[0]]) == ["TERMINATED"])
        assert (s.sessions[live[0]].reason or "").endswith("stopped on request")
