"""Density benchmark: one Docker agent with hundreds of containers starts and ends sessions as
quickly as with ten.

Starts a real nats-server, the quota and scheduler (one process each) and one agent (a
process, Docker runtime, on the engine of ``DOCKER_HOST``: ``eval "$(scripts/docker-up)"``).
At each level (10, then 300 busybox ``sleep`` sessions RUNNING on the agent, filled in
batches), ``--probes`` more sessions are asked for one at a time, each timed from the request
to its ``session.running`` on the log, then destroyed one at a time, each timed from the
request to its ``session.terminated``. The level's sessions keep running meanwhile.

Prints one JSON line: p50/p99/max of both at each level, and the p99 at 300 over the p99 at
10 (goal <= 2 each), and how long each level took to fill. Everything is removed at the
end (what a run cut short leaves, too).

Usage: python bench/density.py [--levels 10,300] [--probes 20] [--batch 25]
"""

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiodocker
from rebuild import quantiles_ms  # bench/rebuild.py, beside this file
from start import Seen, docker_stack  # bench/start.py, beside this file

from events import SessionRunning, SessionTerminated, Slots
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import LABEL_AGENT

AGENT = "bench-density"
IMAGE = "fgpu/busybox:latest"
SLOTS = Slots(cpu=100, mem=16 << 20, fgpu=0)  # 0.1 CPU, 16 MiB, no GPU
SLEEP = ("sleep", "86400")
DEADLINE_S = 600.0  # a batch of the fill on a loaded host; a probe takes a second or so


async def remove_left(agent_id: str) -> None:
    """Remove every container of ``agent_id`` still on the engine (a run cut short)."""
    async with aiodocker.Docker() as docker:
        filters = {"label": [f"{LABEL_AGENT}={agent_id}"]}
        for container in await docker.containers.list(all=True, filters=filters):
            await container.delete(force=True)


async def fill(client: Client, seen: Seen, n: int, batch: int) -> list[str]:
    """``n`` more sessions RUNNING, asked for ``batch`` at a time."""
    ids: list[str] = []
    while len(ids) < n:
        more = await client.create(
            image=IMAGE, slots=SLOTS, command=SLEEP, count=min(batch, n - len(ids)), cpu_only=True
        )
        for sid in more:
            await seen.wait(sid, SessionRunning, DEADLINE_S)
        ids += more
    return ids


async def probe(client: Client, seen: Seen, probes: int) -> tuple[list[float], list[float]]:
    """``probes`` sessions started one at a time, then destroyed one at a time: the
    milliseconds from each request to RUNNING, and from each destroy to TERMINATED."""
    started: list[float] = []
    ids: list[str] = []
    for _ in range(probes):
        t0 = time.perf_counter()
        [sid] = await client.create(image=IMAGE, slots=SLOTS, command=SLEEP, cpu_only=True)
        started.append((await seen.wait(sid, SessionRunning, DEADLINE_S) - t0) * 1000)
        ids.append(sid)
    ended: list[float] = []
    for sid in ids:
        t0 = time.perf_counter()
        await client.destroy(sid)
        ended.append((await seen.wait(sid, SessionTerminated, DEADLINE_S) - t0) * 1000)
    return started, ended


async def main(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="fgpu-bench-density-"))
    levels = sorted(int(n) for n in args.levels.split(","))
    by_level: dict[int, dict[str, Any]] = {}
    with nats_server.nats_server() as server:
        events = await connect(server.url, name="bench-density")
        await events.create_or_update_stream()
        seen = Seen()
        follow = asyncio.create_task(seen.follow(events))
        try:
            # The agent offers enough CPU and memory for every level.
            options = ("--no-shim", "--cpu", "256", "--mem", "64G")
            async with docker_stack(server.url, work, AGENT, *options):
                client = Client(events, SystemClock(), "bench")
                live: list[str] = []
                for level in levels:
                    t0 = time.perf_counter()
                    live += await fill(client, seen, level - len(live), args.batch)
                    filled_s = time.perf_counter() - t0
                    started, ended = await probe(client, seen, args.probes)
                    by_level[level] = {
                        "create_to_running": quantiles_ms(started),
                        "rm_to_terminated": quantiles_ms(ended),
                        "fill_s": round(filled_s, 1),
                    }
                for sid in live:
                    await client.destroy(sid)
                for sid in live:
                    await seen.wait(sid, SessionTerminated, DEADLINE_S)
        finally:
            follow.cancel()
            await events.close()
            await remove_left(AGENT)
    low, high = by_level[levels[0]], by_level[levels[-1]]

    def ratio(key: str) -> float:
        return round(high[key]["p99_ms"] / low[key]["p99_ms"], 2)

    return {
        "bench": "density",
        "levels": levels,
        "probes": args.probes,
        "image": IMAGE,
        **{str(level): figures for level, figures in by_level.items()},
        "ratio_create_to_running_p99": ratio("create_to_running"),
        "ratio_rm_to_terminated_p99": ratio("rm_to_terminated"),
        "target_ratio": 2,
        "logs": str(work),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", default="10,300")
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=25)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
