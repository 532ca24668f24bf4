"""The README's scenario on a log (alice's three sessions, one waits, one is destroyed to make
room, bob's too large one is rejected), with real actors and the dummy runtime; and the
log's records read back."""

from contextlib import aclosing
from dataclasses import dataclass

import anyio

from events import Record, Slots
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.ports import EventLog
from tests.support.cluster import GIB, agent_config, running_cluster, statuses

IMAGE = "fgpu/busybox:latest"


@dataclass
class Scenario:
    ids: list[str]  # alice's three sessions
    waited: str  # the one that waited, then ran
    victim: str  # the one destroyed to make room
    big: str  # bob's, rejected
    busy_seq: int  # a sequence at which two ran and one waited
    final: ClusterState


async def run_scenario(events: EventLog) -> Scenario:
    """The README scenario on ``events``, with real actors and the dummy runtime."""
    clock = SystemClock()
    alice, bob = Client(events, clock, "alice"), Client(events, clock, "bob")
    one = Slots(cpu=500, mem=GIB, fgpu=100)
    async with running_cluster(events, [(agent_config("a1"), DummyRuntime())]):
        ids = await alice.create(image=IMAGE, slots=one, count=3, name="train")

        def busy(s: ClusterState) -> bool:
            found = sorted(statuses(s, ids))
            waiting = [v for v in s.sessions.values() if v.waiting is not None]
            return found == ["PENDING", "RUNNING", "RUNNING"] and len(waiting) == 1

        with anyio.fail_after(20):
            s = await alice.wait_until(busy)
        busy_seq = s.last_seq
        waited = next(i for i in ids if s.sessions[i].status == "PENDING")
        victim = next(i for i in ids if s.sessions[i].status == "RUNNING")
        await alice.destroy(victim)
        big = (await bob.create(image=IMAGE, slots=Slots(cpu=500, mem=GIB, fgpu=500)))[0]
        with anyio.fail_after(20):
            s = await alice.wait_until(
                lambda s: (
                    s.sessions[waited].status == "RUNNING"
                    and s.sessions[victim].status == "TERMINATED"
                    and big in s.sessions
                    and s.sessions[big].status == "REJECTED"
                ),
                s,
            )
    return Scenario(ids, waited, victim, big, busy_seq, s)


async def log_records(events: EventLog, until: int | None = None) -> list[Record]:
    out: list[Record] = []
    async with aclosing(events.read(0, until=until)) as batches:
        async for batch in batches:
            out.extend(batch)
    return out
