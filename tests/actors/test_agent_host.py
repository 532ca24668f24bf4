"""Many agents in one process (``fgpu sim agents``) share one fold and act as separate ones.

Three agents in an AgentHost, each with a runtime of its own, over the in-memory log with
the real quota and scheduler actors: every session runs on the agent it was placed on
and nowhere else, a destroyed one is stopped there, and an agent declared lost answers
by registering again.
"""

import anyio
import pytest

from events import AgentLost, Slots
from events import subjects as subj
from services.actors.agent import LABEL_SESSION, AgentActor
from services.actors.agent_host import AgentHost
from services.actors.common import Provenance, stamp
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from tests.support.cluster import GIB, agent_config, statuses

pytestmark = pytest.mark.anyio

AGENTS = ("h0", "h1", "h2")


async def test_agents_of_a_host_each_run_and_stop_their_own_sessions() -> None:
    log, clock = MemoryLog(), SystemClock()
    runtimes = {a: DummyRuntime() for a in AGENTS}
    agents = [AgentActor(log, runtimes[a], clock, agent_config(a)) for a in AGENTS]
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(AgentHost(log, agents, durable="host").run)
        with anyio.fail_after(10):
            await client.wait_until(lambda s: len(s.agents) == len(AGENTS))
        # Each agent has one GPU of 2 fGPU: six sessions of 1 fGPU fill all three.
        ids = await client.create(
            image="fgpu/busybox:latest",
            slots=Slots(cpu=100, mem=GIB, fgpu=100),
            command=["sleep", "infinity"],
            count=6,
        )
        with anyio.fail_after(10):
            s = await client.wait_until(lambda s: statuses(s, ids) == ["RUNNING"] * 6)
        placed = {sid: s.sessions[sid].agent_id for sid in ids}
        for a in AGENTS:
            running = {c.labels[LABEL_SESSION] for c in await runtimes[a].list({})}
            assert running == {sid for sid, at in placed.items() if at == a}
            assert len(running) == 2

        victim = ids[0]
        await client.destroy(victim)
        with anyio.fail_after(10):
            s = await client.wait_until(lambda s: statuses(s, [victim]) == ["TERMINATED"])
        host = placed[victim]
        assert victim not in {c.labels[LABEL_SESSION] for c in await runtimes[host].list({})}

        # An agent declared lost (heartbeats late) says again that it is there.
        lost = "h1"
        e = stamp(AgentLost, Provenance("monitor", clock.now()), agent_id=lost, reason="test")
        lost_at = await log.append(subj.LEDGER, e)

        def back(s: ClusterState) -> bool:
            a = s.agents[lost]
            registered_since = s.subject_seq.get(subj.agent(lost), 0) > lost_at
            return registered_since and not a.lost

        with anyio.fail_after(10):
            s = await client.wait_until(back, s)
        # Its sessions kept their allocation through it all.
        held = {i for i, at in placed.items() if at == lost and i != victim}
        assert set(s.agents[lost].sessions) == held
        tg.cancel_scope.cancel()
    for a in AGENTS:  # nothing stopped that was not asked to
        assert len(await runtimes[a].list({})) == (1 if a == host else 2)
