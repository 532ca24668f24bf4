"""Two schedulers (and two quota actors) running by mistake never over-allocate.

Each decision round is one atomic batch expecting the ledger's last sequence, so of two
schedulers deciding from the same state only one lands; the other rebuilds and decides
again on top of it.
"""

import collections
import random

import anyio
import pytest

from events import SessionScheduled, Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.state import ClusterState
from tests.support.cluster import GIB, agent_config

pytestmark = pytest.mark.anyio

SIZES = [25, 50, 75, 100, 150, 250, 400]  # 0.25 ... 4 fGPU; an agent holds 2 x 2 fGPU


def settled(ids: list[str]) -> "collections.abc.Callable[[ClusterState], bool]":
    def done(s: ClusterState) -> bool:
        for i in ids:
            v = s.sessions.get(i)
            if v is None:
                return False
            if v.status not in ("RUNNING", "REJECTED") and not (
                v.status == "PENDING" and v.waiting is not None
            ):
                return False
        return True

    return done


async def test_two_schedulers_and_two_quota_actors_never_over_allocate(log: JetStreamLog) -> None:
    clock = SystemClock()
    rng = random.Random(7)
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        for durable in ("quota", "quota-b"):
            await tg.start(QuotaActor(log, clock, durable=durable).run)
        for durable in ("scheduler", "scheduler-b"):
            await tg.start(SchedulerActor(log, clock, durable=durable).run)
        for n in range(3):
            config = agent_config(f"a{n}", gpus=2, fgpu_per_gpu=200)
            await tg.start(AgentActor(log, DummyRuntime(), clock, config).run)
        ids: list[str] = []
        for _ in range(6):
            for size in rng.choices(SIZES, k=20):
                ids += await client.create(
                    image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB, fgpu=size)
                )
        with anyio.fail_after(60):
            s = await client.wait_until(settled(ids))
        tg.cancel_scope.cancel()

    placed: collections.Counter[str] = collections.Counter()
    async for batch in log.read(0):
        for r in batch:
            if isinstance(r.event, SessionScheduled):
                placed[r.event.session_id] += 1
    assert placed and max(placed.values()) == 1  # no session placed twice
    for a in s.agents.values():
        for g in a.gpus.values():
            assert 0 <= g.allocated <= g.capacity
        assert a.allocated.fgpu == sum(g.allocated for g in a.gpus.values())
    running = [v for v in s.sessions.values() if v.status == "RUNNING"]
    assert sum(v.slots.fgpu for v in running) == sum(a.allocated.fgpu for a in s.agents.values())
    assert {v.session_id for v in running} == set(placed)
