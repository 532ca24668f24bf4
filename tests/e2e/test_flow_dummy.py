"""The whole path over a real log with the dummy runtime (the Docker path is in test_e2e)."""

import anyio
import pytest

from events import Slots
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from tests.support.cluster import GIB, agent_config, running_cluster, statuses

pytestmark = pytest.mark.anyio

IMAGE = "fgpu/busybox:latest"


async def test_three_sessions_on_two_fgpu_then_pending_one_runs(log: JetStreamLog) -> None:
    client = Client(log, SystemClock(), "alice")
    async with running_cluster(log, [(agent_config("a1"), DummyRuntime())]):
        ids = await client.create(image=IMAGE, slots=Slots(cpu=1000, mem=GIB, fgpu=100), count=3)

        def two_running(s: ClusterState) -> bool:
            return sorted(statuses(s, ids)) == ["PENDING", "RUNNING", "RUNNING"]

        with anyio.fail_after(20):
            s = await client.wait_until(two_running)
        pending = next(i for i in ids if s.sessions[i].status == "PENDING")
        victim = next(i for i in ids if s.sessions[i].status == "RUNNING")
        await client.destroy(victim)
        with anyio.fail_after(20):
            s = await client.wait_until(
                lambda s: (
                    s.sessions[pending].status == "RUNNING"
                    and s.sessions[victim].status == "TERMINATED"
                ),
                s,
            )
        gpu = s.agents["a1"].gpus[0]
        assert gpu.allocated == 200
        assert set(gpu.shares) == {i for i in ids if i != victim}
