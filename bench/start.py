"""Start benchmark: a session from request to RUNNING, against Docker's own create + start.

Starts a real nats-server, the quota and scheduler (one process each) and one agent (a
process, Docker runtime, one mock GPU, the shim's mount and region as in production: the
built shim if there is one, else a stand-in directory) on the engine of ``DOCKER_HOST``
(``eval "$(scripts/docker-up)"``). Then, one at a time, alternating in the same run:

1. stack: a busybox session asked for (``session.requested`` published) until its
   ``session.running`` is seen on the log by this process;
2. docker: the same container made by aiodocker directly: ``create`` + ``start`` with the
   body copied from the session's own container (image, command, environment, labels,
   limits, mounts, init, log driver, network mode), from the first call to the answer of
   the start.

Each round then times a third start, ``docker_bare``: the same image and command and
nothing else (no mounts, limits, init or environment), which tells what the session's
configuration costs the engine itself. Each session is destroyed, and each direct
container removed, before the next start: the engine runs nothing else while it starts
one. Prints one JSON line: the medians, ``ratio_start_to_docker`` (goal <= 1.2), and the
median of each step of the stack, from the stamps of its events (requested -> admitted
-> scheduled -> preparing -> running: the quota, the scheduler, the agent before and
after its work with the engine).
Usage: python bench/start.py [--runs 15] [--image fgpu/busybox:latest]
"""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiodocker
from schedule import ready, spawn  # bench/schedule.py, beside this file

from events import (
    AnyEvent,
    SessionAdmitted,
    SessionPreparing,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    Slots,
)
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.shim_regions import shim_lib_dir
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import LABEL_SESSION

AGENT = "bench-start"
SLOTS = Slots(cpu=100, mem=64 << 20, fgpu=1)  # 0.1 CPU, 64 MiB, one quantum of the GPU
STEPS = (
    ("admitted", SessionAdmitted),
    ("scheduled", SessionScheduled),
    ("preparing", SessionPreparing),
    ("running", SessionRunning),
)
# What of an inspected container's HostConfig a create body carries over.
_HOST_KEYS = (
    "NetworkMode",
    "Init",
    "LogConfig",
    "NanoCpus",
    "Memory",
    "MemorySwap",
    "Mounts",
    "DeviceRequests",
)


class Seen:
    """Every session event of the log, by session and type, with when this process saw
    it (``perf_counter``)."""

    def __init__(self) -> None:
        self.events: dict[str, dict[type[AnyEvent], tuple[float, AnyEvent]]] = {}
        self._changed = asyncio.Event()

    async def follow(self, events: JetStreamLog) -> None:
        async for batch in events.tail(0):
            now = time.perf_counter()
            for r in batch:
                sid = getattr(r.event, "session_id", None)
                if isinstance(sid, str):
                    self.events.setdefault(sid, {}).setdefault(type(r.event), (now, r.event))
            self._changed.set()

    async def wait(self, session_id: str, kind: type[AnyEvent], deadline_s: float = 60) -> float:
        """When ``kind`` of ``session_id`` was seen; TimeoutError past the deadline."""
        async with asyncio.timeout(deadline_s):
            while kind not in self.events.get(session_id, {}):
                self._changed.clear()
                await self._changed.wait()
        return self.events[session_id][kind][0]

    def steps_ms(self, session_id: str) -> dict[str, float]:
        """Milliseconds from the request to each step, by the events' own stamps."""
        seen = self.events[session_id]
        asked = seen[SessionRequested][1].at
        return {name: (seen[kind][1].at - asked).total_seconds() * 1000 for name, kind in STEPS}


def direct_body(inspected: dict[str, Any], round_no: int, copies: Path) -> dict[str, Any]:
    """A create body for the container ``inspected`` describes, its labels' values marked
    as the bench's (so no agent takes it for a session's), and its mounted files copied
    into ``copies`` (the session's region file goes with the session)."""
    config, host = inspected["Config"], inspected["HostConfig"]
    labels = {k: f"bench-direct-{round_no}" for k in config.get("Labels") or {}}
    copies.mkdir(exist_ok=True)
    for m in host.get("Mounts") or ():
        if Path(m["Source"]).is_file():
            copy = copies / Path(m["Source"]).name
            shutil.copyfile(m["Source"], copy)
            m["Source"] = str(copy)
    return {
        "Image": config["Image"],
        "Cmd": config.get("Cmd"),
        "Env": config.get("Env"),
        "Labels": labels,
        "Tty": False,
        "OpenStdin": False,
        "AttachStdin": False,
        "HostConfig": {k: host[k] for k in _HOST_KEYS if host.get(k) is not None},
    }


def bare_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body``'s image, command and labels alone: no mounts, limits, init or environment."""
    keep = ("Image", "Cmd", "Labels")
    return {**{k: body[k] for k in keep}, "HostConfig": {"NetworkMode": "none"}}


async def direct_start_ms(docker: aiodocker.Docker, body: dict[str, Any], name: str) -> float:
    """Create and start ``body`` as ``name``; the milliseconds it took. Removed after."""
    t0 = time.perf_counter()
    container = await docker.containers.create(body, name=name)
    await container.start()
    spent = (time.perf_counter() - t0) * 1000
    await container.delete(force=True)
    return spent


async def session_start_ms(
    client: Client, seen: Seen, docker: aiodocker.Docker, image: str, round_no: int, work: Path
) -> tuple[str, float, dict[str, Any]]:
    """Ask for a session of ``image`` and time it to RUNNING; its id, the milliseconds, and
    the create body of its container (for the direct start, its files copied under
    ``work``). Destroyed and gone after."""
    t0 = time.perf_counter()
    [sid] = await client.create(image=image, slots=SLOTS, command=("sleep", "3600"))
    ms = (await seen.wait(sid, SessionRunning) - t0) * 1000
    found = await docker.containers.list(all=True, filters={"label": [f"{LABEL_SESSION}={sid}"]})
    body = direct_body(await found[0].show(), round_no, work / "direct")
    await client.destroy(sid)
    await seen.wait(sid, SessionTerminated)
    return sid, ms, body


def stand_in_shim(where: Path) -> str:
    """A directory with a libcuda.so.1: mounted as the built shim's would be."""
    where.mkdir()
    (where / "libcuda.so.1").touch()
    return str(where)


@asynccontextmanager
async def stack(url: str, work: Path) -> AsyncIterator[None]:
    """Quota, scheduler and the agent (the shim's mount and region) as processes of their
    own, ready, until the block ends; they log into ``work``."""
    shim = shim_lib_dir() or stand_in_shim(work / "shim")
    async with docker_stack(
        url, work, AGENT, "--shim-dir", shim, "--regions-dir", str(work / "regions")
    ):
        yield


@asynccontextmanager
async def docker_stack(url: str, work: Path, agent_id: str, *options: str) -> AsyncIterator[None]:
    """Quota, scheduler and a Docker agent of one mock GPU (and ``options``) as processes of
    their own, ready, until the block ends; they log into ``work``."""
    agent = (
        *("agent", "--agent-id", agent_id, "--mock-gpus", "1", "--runtime", "docker"),
        *options,
    )
    env = {**os.environ, "FGPU_HOME": str(work / "home")}
    parts = {"quota": ("quota",), "scheduler": ("scheduler",), "agent": agent}
    procs = {n: spawn(url, *a, log_dir=str(work), name=n, env=env) for n, a in parts.items()}
    async with ready(procs, str(work)):
        yield


async def main(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="fgpu-bench-start-"))
    stack_ms: list[float] = []
    docker_ms: list[float] = []
    bare_ms: list[float] = []
    steps: list[dict[str, float]] = []
    with nats_server.nats_server() as server:
        events = await connect(server.url, name="bench-start")
        await events.create_or_update_stream()
        seen = Seen()
        follow = asyncio.create_task(seen.follow(events))
        docker = aiodocker.Docker()
        try:
            async with stack(server.url, work):
                client = Client(events, SystemClock(), "bench")
                body: dict[str, Any] = {}
                for i in range(args.warmup + args.runs):
                    # Which goes first alternates: each finds the engine just as quiet.
                    if i % 2:
                        direct = await direct_start_ms(docker, body, f"fgpu-bench-direct-{i}")
                    sid, ms, body = await session_start_ms(
                        client, seen, docker, args.image, i, work
                    )
                    if not i % 2:
                        direct = await direct_start_ms(docker, body, f"fgpu-bench-direct-{i}")
                    bare = await direct_start_ms(docker, bare_body(body), f"fgpu-bench-bare-{i}")
                    if i >= args.warmup:
                        stack_ms.append(ms)
                        docker_ms.append(direct)
                        bare_ms.append(bare)
                        steps.append(seen.steps_ms(sid))
        finally:
            follow.cancel()
            await docker.close()
            await events.close()
    start, direct = statistics.median(stack_ms), statistics.median(docker_ms)
    return {
        "bench": "start",
        "runs": args.runs,
        "image": args.image,
        "start_ms_p50": round(start, 1),
        "docker_ms_p50": round(direct, 1),
        "ratio_start_to_docker": round(start / direct, 3),
        "docker_bare_ms_p50": round(statistics.median(bare_ms), 1),
        "steps_ms_p50": {
            name: round(statistics.median(s[name] for s in steps), 1) for name, _ in STEPS
        },
        "target_ratio": 1.2,
        "logs": str(work),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--image", default="fgpu/busybox:latest")
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
