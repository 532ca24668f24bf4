"""Scheduler benchmark: requests to RUNNING at scale, against a raw JetStream baseline.

Starts a real nats-server, the quota and scheduler actors (one process each) and 1,000
simulated agents (one process, dummy runtime: containers start instantly), then:

1. baseline: the raw JetStream publish rate (publish_async, same payload size) on this
   machine, in this run;
2. throughput: N session requests published at once; sessions per second from the first
   request published to the last RUNNING observed;
3. latency: requests at a steady R per second; p50 and p99 of request published to RUNNING
   observed, by an observer following the log.

Prints one JSON line. Usage: python bench/schedule.py [--sessions 10000] [--agents 1000]
"""

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
from rebuild import quantiles_ms  # bench/rebuild.py, beside this file

from events import SessionRequested, SessionRunning, Slots, encode
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.client import Client

FGPU = str(Path(sys.executable).parent / "fgpu")
GPUS_PER_AGENT = 4
FGPU_PER_GPU = 4  # each session asks for 1 fGPU


async def raw_publish_rate(url: str, n: int, payload: bytes) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="BENCHRAW", subjects=["benchraw.>"])
    t0 = time.perf_counter()
    futures = [await js.publish_async(f"benchraw.{i % 100}", payload) for i in range(n)]
    await asyncio.gather(*futures)
    rate = n / (time.perf_counter() - t0)
    await js.delete_stream("BENCHRAW")
    await nc.close()
    return rate


class Observer:
    """Follows the log and notes when each session is seen RUNNING."""

    def __init__(self) -> None:
        self.running: dict[str, float] = {}
        self.event = asyncio.Event()

    async def run(self, url: str) -> None:
        await self.follow(await connect(url, name="bench-observer"))

    async def follow(self, events: JetStreamLog) -> None:
        # Only agents' session reports: the observer must not lag behind what it times.
        async for batch in events.tail(0, subject="fgpu.agent.*.s.*"):
            now = time.perf_counter()
            for r in batch:
                if isinstance(r.event, SessionRunning):
                    self.running.setdefault(r.event.session_id, now)
            self.event.set()

    async def wait_for(self, ids: list[str], deadline_s: float) -> None:
        end = time.perf_counter() + deadline_s
        while not all(i in self.running for i in ids):
            self.event.clear()
            remaining = end - time.perf_counter()
            if remaining <= 0:
                missing = sum(i not in self.running for i in ids)
                raise TimeoutError(f"{missing} sessions not RUNNING after {deadline_s} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), remaining)


def spawn(
    url: str, *args: str, log_dir: str, name: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    out = open(os.path.join(log_dir, f"{name}.log"), "wb")  # noqa: SIM115 - lives with the process
    return subprocess.Popen(
        [FGPU, "--nats", url, *args], stdout=out, stderr=subprocess.STDOUT, env=env
    )


@contextlib.asynccontextmanager
async def ready(procs: dict[str, subprocess.Popen[bytes]], log_dir: str) -> AsyncIterator[None]:
    """``procs`` (by the name ``spawn`` logged each under), each ready, until the block
    ends; then terminated."""
    try:
        for name, p in procs.items():
            await wait_ready(os.path.join(log_dir, f"{name}.log"), p)
        yield
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(30)


async def wait_ready(path: str, p: subprocess.Popen[bytes], deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        text = await asyncio.to_thread(Path(path).read_text, errors="replace")
        if "ready" in text:
            return
        if p.poll() is not None:
            raise RuntimeError(f"{path}: exited {p.returncode}\n{text[-2000:]}")
        await asyncio.sleep(0.1)
    raise TimeoutError(path)


async def main(args: argparse.Namespace) -> dict[str, object]:
    log_dir = tempfile.mkdtemp(prefix="fgpu-bench-")
    with nats_server.nats_server() as server:
        url = server.url
        events = await connect(url, name="bench")
        await events.create_or_update_stream()
        sample = SessionRequested(
            id="x" * 32,
            at=SystemClock().now(),
            actor="bench",
            session_id="s" * 13,
            owner="bench",
            image="fgpu/busybox:latest",
            slots=Slots(cpu=100, mem=1 << 30, fgpu=100),
        )
        baseline = await raw_publish_rate(url, 20_000, encode(sample))

        procs = [
            spawn(url, "quota", log_dir=log_dir, name="quota"),
            spawn(url, "scheduler", log_dir=log_dir, name="scheduler"),
            spawn(
                url,
                "sim",
                "agents",
                "--count",
                str(args.agents),
                "--gpus",
                str(GPUS_PER_AGENT),
                "--fgpu-per-gpu",
                str(FGPU_PER_GPU),
                log_dir=log_dir,
                name="agents",
            ),
        ]
        try:
            for name, p in zip(("quota", "scheduler", "agents"), procs, strict=True):
                await wait_ready(os.path.join(log_dir, f"{name}.log"), p)
            observer = Observer()
            watch = asyncio.create_task(observer.run(url))
            # The agents' registrations must be folded by the scheduler first.
            await asyncio.sleep(1.0)
            owners = [Client(events, SystemClock(), f"team{k}") for k in range(10)]
            slots = Slots(cpu=100, mem=1 << 30, fgpu=100)

            # Throughput: everything at once.
            t0 = time.perf_counter()
            ids: list[str] = []
            per_owner = args.sessions // len(owners)
            for c in owners:
                ids += await c.create(image="fgpu/busybox:latest", slots=slots, count=per_owner)
            published = time.perf_counter() - t0
            await observer.wait_for(ids, 600)
            t_last = max(observer.running[i] for i in ids)
            throughput = len(ids) / (t_last - t0)

            # Latency at a steady rate, from a quiet cluster.
            await asyncio.sleep(2.0)
            sent: dict[str, float] = {}
            interval = 1.0 / args.rate
            next_at = time.perf_counter()
            for k in range(args.rate * args.latency_seconds):
                now = time.perf_counter()
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                next_at += interval
                c = owners[k % len(owners)]
                t = time.perf_counter()
                sid = (await c.create(image="fgpu/busybox:latest", slots=slots))[0]
                sent[sid] = t
            await observer.wait_for(list(sent), 120)
            lat = sorted((observer.running[i] - t) * 1000 for i, t in sent.items())
            watch.cancel()
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
        await events.close()
    return {
        "bench": "schedule",
        "sessions": len(ids),
        "agents": args.agents,
        "sessions_per_s": round(throughput, 1),
        "publish_s": round(published, 3),
        "latency_rate_per_s": args.rate,
        "latency_requests": len(lat),
        **quantiles_ms(lat),
        "raw_jetstream_publish_per_s": round(baseline, 1),
        "ratio_sessions_to_raw_publish": round(throughput / baseline, 4),
        "logs": log_dir,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--latency-seconds", type=int, default=10)
    args = parser.parse_args()
    # Sessions never end here: every one needs a place of its own to reach RUNNING.
    wanted = args.sessions + args.rate * args.latency_seconds
    room = args.agents * GPUS_PER_AGENT * FGPU_PER_GPU
    if wanted > room:
        parser.error(
            f"{wanted} sessions of 1 fGPU (--sessions plus --rate x --latency-seconds) "
            f"do not fit on {args.agents} agents of {room // args.agents} fGPU: add agents"
        )
    print(json.dumps(asyncio.run(main(args))))
