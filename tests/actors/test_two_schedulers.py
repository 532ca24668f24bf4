"""Two schedulers (and two quota actors) running by mistake never over-allocate.

Each decision round is one atomic batch expecting the ledger's last sequence, so of two
schedulers deciding from the same state only one lands; the other rebuilds and decides
again on top of it.
"""

import collections
import random
from collections.abc import Sequence

import anyio
import pytest

from events import AnyEvent, SessionScheduled, Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.ports import ConcurrencyConflict
from tests.support.cluster import GIB, agent_config

pytestmark = pytest.mark.anyio

SIZES = [25, 50, 75, 100, 150, 250, 400]  # 0.25 ... 4 fGPU; an agent holds 2 x 2 fGPU


class _Writer(JetStreamLog):
    """The log (the same connection) as one scheduler writes to it: each decision batch it
    stores is counted, its placements named, and each one refused for a stale view is
    counted, so a test can tell which of two schedulers decided what."""

    def __init__(self, log: JetStreamLog) -> None:
        super().__init__(log.client)
        self.stored = 0
        self.conflicts = 0
        self.placed: list[str] = []

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        try:
            seq = await super().append_batch(
                items,
                expect_subject=expect_subject,
                expected_last_subject_seq=expected_last_subject_seq,
            )
        except ConcurrencyConflict:
            self.conflicts += 1
            raise
        self.stored += 1
        self.placed += [e.session_id for _, e in items if isinstance(e, SessionScheduled)]
        return seq


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
        writers = {"scheduler": _Writer(log), "scheduler-b": _Writer(log)}
        for durable, writer in writers.items():
            await tg.start(SchedulerActor(writer, clock, durable=durable).run)
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
    # They raced: each read the work and decided on it, and at least once both decided
    # from the same view, so one batch was refused whole and decided again.
    for durable, w in writers.items():
        assert w.stored + w.conflicts > 0, f"{durable} never decided"
    assert sum(w.conflicts for w in writers.values()) > 0, "no decision ever conflicted"
    # What the log holds is what the two stored, each placement by one of them only.
    by_either = collections.Counter(sid for w in writers.values() for sid in w.placed)
    assert by_either == placed
    for a in s.agents.values():
        for g in a.gpus.values():
            assert 0 <= g.allocated <= g.capacity
        assert a.allocated.fgpu == sum(g.allocated for g in a.gpus.values())
    running = [v for v in s.sessions.values() if v.status == "RUNNING"]
    assert sum(v.slots.fgpu for v in running) == sum(a.allocated.fgpu for a in s.agents.values())
    assert {v.session_id for v in running} == set(placed)
