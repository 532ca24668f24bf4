"""A real NATS cluster: three nats-server processes routed on loopback ports, the stream
with three replicas, and the actors connected to all three, two schedulers among them.
The stream's leader is killed (SIGKILL) a quarter into a burst of requests, one of the
schedulers halfway: no acknowledged request is lost, no session is placed twice, nothing
is over-allocated, and every session runs. Then elections in a row, in the orders an
operator meets (``SEQUENCES``, as ``bench/failover.py`` times them): the same holds, and
placements resume after the last (requests acknowledged after it run too)."""

from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest
from nats.errors import Error as NatsError

from events import SessionScheduled, Slots
from events import subjects as subj
from services.actors.agent import AgentActor
from services.actors.agent_host import AgentHost
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters import nats_server
from services.adapters.cluster_faults import Fault, Faults
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.status import SessionStatus
from services.ports import LogError
from tests.support.cluster import agent_config

pytestmark = pytest.mark.anyio
AGENTS = 30  # 80 sessions of 0.1 fGPU each: room for 2,400
SESSIONS = 2000
BURST = 100  # requests per append
SLOTS = Slots(cpu=100, mem=64 << 20, fgpu=10)
# Faults at shares of a burst acknowledged: a follower killed and back, then the leader
# killed; the leader killed and back; the leader killed, its successor too, the first
# back at once (two of three again).
SEQUENCES: dict[str, tuple[tuple[float, Fault], ...]] = {
    "follower_restart_then_leader_kill": (
        (0.2, "kill-follower"),
        (0.3, "restart"),
        (0.5, "kill-leader"),
    ),
    "leader_kill_then_return": ((0.25, "kill-leader"), (0.5, "restart")),
    "two_kills_one_back": ((0.25, "kill-leader"), (0.5, "kill-leader"), (0.5, "restart")),
}


async def _ready(url: str) -> JetStreamLog:
    """A connection once the cluster has a JetStream leader: the stream made, R3."""
    with anyio.fail_after(60):
        while True:
            log = await connect(url, name="test-admin")
            try:
                await log.create_or_update_stream(replicas=3)
                return log
            except LogError:
                await log.close()
                await anyio.sleep(0.5)


@asynccontextmanager
async def actors(url: str, agents: int = AGENTS) -> AsyncIterator[anyio.CancelScope]:
    """Quota, two schedulers and ``agents`` agents (one host), each on a connection of its
    own; the cancel scope of the first scheduler, to kill it."""
    clock = SystemClock()
    names = ("quota", "scheduler-1", "scheduler-2", "agents")
    logs = [await connect(url, name=f"test-{k}") for k in names]
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(QuotaActor(logs[0], clock).run)
            first = anyio.CancelScope()

            async def doomed(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                with first:
                    await SchedulerActor(logs[1], clock, durable="scheduler-1").run(
                        task_status=task_status
                    )

            await tg.start(doomed)
            await tg.start(SchedulerActor(logs[2], clock, durable="scheduler-2").run)
            configs = [agent_config(f"a{i}", gpus=4, fgpu_per_gpu=200) for i in range(agents)]
            agents = [AgentActor(logs[3], DummyRuntime(), clock, c) for c in configs]
            await tg.start(AgentHost(logs[3], agents, durable="agent-host").run)
            yield first
            tg.cancel_scope.cancel()
    finally:
        for log in logs:
            await log.close()


async def test_the_stream_leader_killed_mid_burst_loses_and_doubles_nothing() -> None:
    with nats_server.nats_cluster(3) as servers:
        url = ",".join(s.url for s in servers.values())
        admin = await _ready(url)
        try:
            async with actors(url) as first_scheduler:
                client = Client(admin, SystemClock(), "alice")
                acked: list[str] = []
                killed = ""
                with anyio.fail_after(120):
                    while len(acked) < SESSIONS:
                        if len(acked) >= SESSIONS // 4 and not killed:
                            killed = await Faults(servers, admin).do("kill-leader")
                        if len(acked) >= SESSIONS // 2:
                            first_scheduler.cancel()  # and one of the two schedulers dies
                        try:
                            acked += await client.create(
                                image="fgpu/busybox:latest", slots=SLOTS, count=BURST
                            )
                        except LogError:
                            await anyio.sleep(0.2)  # not acknowledged: asked again
                    final = await _all_running(client, acked)
                    assert (await admin.stream_info()).leader != killed
                scheduled = await _placements(admin)
        finally:
            await admin.close()
    assert killed
    _none_lost_or_doubled(final, acked, scheduled)


@pytest.mark.parametrize("sequence", sorted(SEQUENCES))
async def test_elections_in_a_row_lose_and_double_nothing_and_placements_resume(
    sequence: str,
) -> None:
    sessions, agents = 600, 8  # room for 640
    with nats_server.nats_cluster(3) as servers:
        url = ",".join(s.url for s in servers.values())
        admin = await _ready(url)
        faults = Faults(servers, admin)
        try:
            async with actors(url, agents):
                client = Client(admin, SystemClock(), "alice")
                acked: list[str] = []
                todo = deque(SEQUENCES[sequence])
                with anyio.fail_after(240):
                    while len(acked) < sessions:
                        while todo and len(acked) >= todo[0][0] * sessions:
                            await faults.do(todo.popleft()[1])
                        try:
                            acked += await client.create(
                                image="fgpu/busybox:latest", slots=SLOTS, count=BURST
                            )
                        except LogError:
                            await anyio.sleep(0.2)  # not acknowledged: asked again
                    # Half the burst was asked after the last fault: its placements
                    # resumed once the cluster had its leaders again.
                    final = await _all_running(client, acked)
                scheduled = await _placements(admin)
        finally:
            await admin.close()
    assert [fault for _, fault, _ in faults.done] == [f for _, f in SEQUENCES[sequence]]
    _none_lost_or_doubled(final, acked, scheduled)


async def _placements(admin: JetStreamLog) -> dict[str, list[str]]:
    """Each session's placements in the ledger, each said as ``seq id actor agent``."""
    scheduled: dict[str, list[str]] = defaultdict(list)
    async for batch in admin.read(0):
        for r in batch:
            if isinstance(r.event, SessionScheduled):
                e = r.event
                scheduled[e.session_id].append(f"{r.seq} {e.id} {e.actor} {e.agent_id}")
    return scheduled


def _none_lost_or_doubled(
    final: ClusterState, acked: list[str], scheduled: dict[str, list[str]]
) -> None:
    # Nothing lost: every acknowledged request runs. Nothing placed twice or over capacity.
    assert all(final.sessions[i].status is SessionStatus.RUNNING for i in acked)
    doubled = {sid: seen for sid, seen in scheduled.items() if len(seen) > 1}
    # Said whole when it fails: the stored records (one seq twice: the read; two seqs
    # with one id: a stored duplicate; two ids: the scheduler decided twice).
    assert not doubled, f"{len(doubled)} placed twice, e.g. {list(doubled.items())[:5]}"
    for a in final.agents.values():
        assert a.allocated.fgpu <= a.capacity.fgpu and a.allocated.cpu <= a.capacity.cpu
        assert sum(g.allocated for g in a.gpus.values()) == a.allocated.fgpu


async def _all_running(client: Client, ids: list[str]) -> ClusterState:
    """The state once every session of ``ids`` runs (the fold of the whole log).

    Each look is a read of its own, bounded: the test's reader (a consumer of one
    replica, made while elections may still go on) is not what is under test, the
    actors are. Once the whole wait has run out, what the log says is printed: which
    sessions stand where, and how far each actor's consumer has got."""
    wanted = set(ids)
    seen = ClusterState()

    def done(s: ClusterState) -> bool:
        nonlocal seen
        seen = s
        return all(
            i in s.sessions and s.sessions[i].status is SessionStatus.RUNNING for i in wanted
        )

    try:
        while True:
            with anyio.move_on_after(_LOOK_S):
                try:
                    return await client.wait_until(done)
                except LogError:
                    await anyio.sleep(0.2)  # the reader's server went: read again
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(20):
            print("sessions by status:", Counter(_status(seen, i) for i in wanted))
            await _print_consumers(client)
        raise


_LOOK_S = 40.0


def _status(state: ClusterState, session_id: str) -> str:
    v = state.sessions.get(session_id)
    return "unseen" if v is None else v.status.value


async def _print_consumers(client: Client) -> None:
    """The stream's leader and replicas, and each actor's consumer: what it has yet to
    deliver and to have acknowledged (for a failure's report)."""
    log = client.events
    assert isinstance(log, JetStreamLog)
    try:
        info = await log.stream_info()
        print("stream leader:", info.leader, "last seq:", info.last_seq)
        for durable in ("quota", "scheduler-1", "scheduler-2", "agent-host"):
            c = await log.js.consumer_info(subj.STREAM, durable)
            where = c.cluster.leader if c.cluster else None
            print(
                durable,
                "pending:",
                c.num_pending,
                "ack pending:",
                c.num_ack_pending,
                "delivered:",
                c.delivered.stream_seq,
                "leader:",
                where,
            )
    except (LogError, NatsError) as e:
        print("no answer:", e)
