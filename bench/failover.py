"""Failover benchmark: the stream's leader killed in a 3-node NATS cluster mid-burst.

Three nats-servers clustered on loopback ports (the stream with three replicas); quota,
scheduler and simulated agents (dummy runtime, one host) in this process, connected to
all three addresses. A burst of requests is asked in appends of 100; a quarter of the
way, the server leading the stream is killed (SIGKILL). Figures: the longest gap between
two consecutive placements on the ledger (ms, by their time stamps), sessions
acknowledged but not RUNNING at the end (lost: must be 0), sessions placed twice (must
be 0). Baseline, same run: the same burst on a fresh cluster where nothing is killed.

Prints one JSON line. Usage: python bench/failover.py [--sessions 2000]
"""

import argparse
import asyncio
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from events import SessionScheduled, Slots
from services.actors.agent import AgentActor, AgentConfig
from services.actors.agent_host import AgentHost
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.gpu_probe import MockGpus
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.state import ClusterState
from services.domain.status import SessionStatus
from services.ports import LogError

SLOTS = Slots(cpu=100, mem=64 << 20, fgpu=10)  # 0.1 fGPU: 80 on an agent of 4 GPUs
PER_AGENT = 80
BURST = 100


def _config(i: int) -> AgentConfig:
    return AgentConfig(
        agent_id=f"a{i}",
        capacity=Slots(cpu=256_000, mem=2048 << 30),
        gpus=tuple(MockGpus.uniform(4, model="Sim", mem=80 << 30, sm_count=132).gpus()),
        fgpu_per_gpu=200,
        mock_gpus=True,
        runtime_name="dummy",
    )


@asynccontextmanager
async def _actors(url: str, agents: int) -> AsyncIterator[None]:
    clock = SystemClock()
    logs = [await connect(url, name=f"bench-{k}") for k in ("quota", "scheduler", "agents")]
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(QuotaActor(logs[0], clock).run)
            await tg.start(SchedulerActor(logs[1], clock).run)
            hosted = [AgentActor(logs[2], DummyRuntime(), clock, _config(i)) for i in range(agents)]
            await tg.start(AgentHost(logs[2], hosted, durable="bench-agents").run)
            yield
            tg.cancel_scope.cancel()
    finally:
        for log in logs:
            await log.close()


async def _admin(url: str) -> JetStreamLog:
    with anyio.fail_after(60):
        while True:
            log = await connect(url, name="bench-admin")
            try:
                await log.create_or_update_stream(replicas=3)
                return log
            except LogError:
                await log.close()
                await anyio.sleep(0.5)


async def _leader(admin: JetStreamLog) -> str:
    info = await admin._api("stream info", "STREAM.INFO.FGPU")
    return str(info["cluster"]["leader"])


async def run(sessions: int, *, kill: bool) -> dict[str, object]:
    agents = -(-sessions // PER_AGENT) + 1
    with nats_server.nats_cluster(3) as servers:
        url = ",".join(s.url for s in servers.values())
        admin = await _admin(url)
        try:
            async with _actors(url, agents):
                client = Client(admin, SystemClock(), "bench")
                acked: list[str] = []
                killed = None
                while len(acked) < sessions:
                    if kill and killed is None and len(acked) >= sessions // 4:
                        killed = await _leader(admin)
                        servers[killed].process.kill()
                    try:
                        acked += await client.create(
                            image="fgpu/busybox:latest", slots=SLOTS, count=BURST
                        )
                    except LogError:
                        await anyio.sleep(0.2)
                final = await _settled(client, acked)
            placed: list[SessionScheduled] = []
            async for batch in admin.read(0):
                placed += [r.event for r in batch if isinstance(r.event, SessionScheduled)]
        finally:
            await admin.close()
    times = sorted(e.at for e in placed)
    gaps = [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(times)]
    twice = sum(1 for n in Counter(e.session_id for e in placed).values() if n > 1)
    running = SessionStatus.RUNNING
    lost = sum(1 for i in acked if i not in final.sessions or final.sessions[i].status != running)
    return {
        "killed": killed,
        "longest_gap_ms": round(max(gaps, default=0.0), 1),
        "lost": lost,
        "placed_twice": twice,
    }


async def _settled(client: Client, ids: list[str]) -> ClusterState:
    wanted = set(ids)

    def done(s: ClusterState) -> bool:
        return all(
            i in s.sessions and s.sessions[i].status is SessionStatus.RUNNING for i in wanted
        )

    with anyio.fail_after(300):
        while True:
            try:
                return await client.wait_until(done)
            except LogError:
                await anyio.sleep(0.2)


async def main(args: argparse.Namespace) -> dict[str, object]:
    baseline = await run(args.sessions, kill=False)
    failover = await run(args.sessions, kill=True)
    return {
        "bench": "failover",
        "sessions": args.sessions,
        "longest_gap_ms": failover["longest_gap_ms"],
        "longest_gap_ms_no_kill": baseline["longest_gap_ms"],
        "ratio_gap_kill_to_no_kill": round(
            float(str(failover["longest_gap_ms"]))
            / max(1.0, float(str(baseline["longest_gap_ms"]))),
            1,
        ),
        "sessions_lost": failover["lost"],
        "placed_twice": failover["placed_twice"],
        "killed": failover["killed"],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=2000)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
