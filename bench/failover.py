"""Failover benchmark: servers of a 3-node NATS cluster killed (SIGKILL) and brought back
in the middle of a burst, in the orders an operator meets.

Three nats-servers clustered on loopback ports (the stream with three replicas); quota,
scheduler and simulated agents (dummy runtime, one host) in this process, connected to
all three addresses. A burst of requests is asked in appends of 100; each sequence acts
on the servers at set shares of the burst acknowledged:

- ``leader_kill``: the stream's leader, a quarter in.
- ``follower_restart_then_leader_kill``: a follower a fifth in, back at 30 %, then the
  leader at half.
- ``leader_kill_then_return``: the leader a quarter in, back at half.
- ``two_kills_one_back``: the leader a quarter in; at half the new leader too, and the
  first back at once (two of three again).

Figures per sequence: the longest gap between two consecutive placements on the ledger
(ms, by their stamps; the first from the burst's start) and its ratio to the gap of the
same burst with nothing killed (run first, on a fresh cluster: the goal is <= 3); the
leaders the servers elected within that gap (the stream's, its consumers' and the
metadata leader, from the servers' logs, ms from the gap's start), ``server_ms`` when the
last of them came and ``resumed_after_ms`` how long placements took to resume after it
(the clients' part); for each kill, how long until the stream had a new leader; sessions
acknowledged but not RUNNING at the end (lost: must be 0); sessions placed twice (must
be 0).

Prints one JSON line. Usage: python bench/failover.py [--sessions 2000] [--only NAME ...]
"""

import argparse
import asyncio
import itertools
import json
import re
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio

from events import SessionScheduled, Slots
from services.actors.agent import AgentActor, AgentConfig
from services.actors.agent_host import AgentHost
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters import nats_server
from services.adapters.cluster_faults import Fault, Faults
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.gpu_probe import MockGpus
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.status import SessionStatus
from services.ports import LogError

SLOTS = Slots(cpu=100, mem=64 << 20, fgpu=10)  # 0.1 fGPU: 80 on an agent of 4 GPUs
PER_AGENT = 80
BURST = 100
GOAL_RATIO = 3


@dataclass(frozen=True)
class Step:
    at: float  # the share of the burst acknowledged
    fault: Fault


SEQUENCES: dict[str, tuple[Step, ...]] = {
    "leader_kill": (Step(0.25, "kill-leader"),),
    "follower_restart_then_leader_kill": (
        Step(0.2, "kill-follower"),
        Step(0.3, "restart"),
        Step(0.5, "kill-leader"),
    ),
    "leader_kill_then_return": (Step(0.25, "kill-leader"), Step(0.5, "restart")),
    "two_kills_one_back": (
        Step(0.25, "kill-leader"),
        Step(0.5, "kill-leader"),
        Step(0.5, "restart"),
    ),
}

# A leader elected, as nats-server logs it: the stream's, one of its consumers', the
# metadata leader (which makes and removes consumers).
_ELECTED = re.compile(
    r"^\[\d+\] (?P<at>\S+ \S+) \[INF\] (?:JetStream cluster new (?P<kind>stream|consumer) "
    r"leader for '[^']* > FGPU(?: > (?P<consumer>[^']+))?'"
    r"|(?P<meta>Self is new JetStream cluster metadata leader))"
)


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


def _elections(servers: dict[str, nats_server.NatsServer]) -> list[tuple[datetime, str]]:
    """Every leader of the stream, its consumers and the metadata the servers elected, by
    their logs (local time, on this machine's clock)."""
    found = []
    for server in servers.values():
        with open(server.log_path, errors="replace") as f:
            for line in f:
                m = _ELECTED.match(line)
                if m is None:
                    continue
                at = datetime.strptime(m["at"], "%Y/%m/%d %H:%M:%S.%f").astimezone()
                what = "meta" if m["meta"] else m["consumer"] or "stream"
                found.append((at, what))
    return sorted(found)


async def run(sessions: int, steps: tuple[Step, ...]) -> dict[str, object]:
    agents = -(-sessions // PER_AGENT) + 1
    with nats_server.nats_cluster(3) as servers:
        url = ",".join(s.url for s in servers.values())
        admin = await _admin(url)
        faults = Faults(servers, admin)
        try:
            async with _actors(url, agents):
                client = Client(admin, SystemClock(), "bench")
                acked: list[str] = []
                todo = deque(steps)
                started = datetime.now(UTC)
                while len(acked) < sessions:
                    while todo and len(acked) >= todo[0].at * sessions:
                        await faults.do(todo.popleft().fault)
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
        elections = _elections(servers)
    running = SessionStatus.RUNNING
    lost = sum(1 for i in acked if i not in final.sessions or final.sessions[i].status != running)
    twice = sum(1 for n in Counter(e.session_id for e in placed).values() if n > 1)
    return {
        "steps": [f"{fault} {name}" for _, fault, name in faults.done],
        "stream_elected_after_ms": _stream_elections(faults.done, elections),
        **_longest_gap(sorted([started, *(e.at for e in placed)]), elections),
        "lost": lost,
        "placed_twice": twice,
    }


def _longest_gap(times: list[datetime], elections: list[tuple[datetime, str]]) -> dict[str, object]:
    """The longest gap between placements (the first from the burst's start), the leaders
    elected within it (ms from its start), when the last came and how long placements
    took to resume after it."""
    if len(times) < 2:
        return {"longest_gap_ms": 0.0}
    start, end = max(itertools.pairwise(times), key=lambda p: p[1] - p[0])
    within = [(at, what) for at, what in elections if start < at < end]
    last = within[-1][0] if within else start
    return {
        "longest_gap_ms": _ms(start, end),
        "elected_in_gap_ms": [[what, _ms(start, at)] for at, what in within],
        "server_ms": _ms(start, last),
        "resumed_after_ms": _ms(last, end),
    }


def _stream_elections(
    done: list[tuple[datetime, Fault, str]], elections: list[tuple[datetime, str]]
) -> list[float | None]:
    """For each kill, how long until the stream had its next leader (None: none came
    before the next kill, as after a follower's)."""
    kills = [at for at, fault, _ in done if fault != "restart"]
    if not kills:
        return []
    found: list[float | None] = []
    for at, end in zip(kills, [*kills[1:], datetime.max.replace(tzinfo=UTC)], strict=True):
        nxt = (e for e, what in elections if what == "stream" and at < e < end)
        found.append(next((_ms(at, e) for e in nxt), None))
    return found


def _ms(a: datetime, b: datetime) -> float:
    return round((b - a).total_seconds() * 1000, 1)


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
    baseline = await run(args.sessions, ())
    quiet = float(str(baseline["longest_gap_ms"]))
    figures: dict[str, object] = {}
    for name in args.only or SEQUENCES:
        result = await run(args.sessions, SEQUENCES[name])
        gap = float(str(result["longest_gap_ms"]))
        figures[name] = {"ratio_to_no_kill": round(gap / max(1.0, quiet), 1), **result}
    return {
        "bench": "failover",
        "sessions": args.sessions,
        "longest_gap_ms_no_kill": quiet,
        "goal_ratio": GOAL_RATIO,
        "sequences": figures,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--only", nargs="*", choices=sorted(SEQUENCES), default=None)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
