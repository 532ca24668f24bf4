"""kill -9 of the scheduler, quota and agent processes in the middle of a burst.

Real processes (`fgpu quota|scheduler|agent`), a real NATS server, a real Docker engine.
After a restart every session ends RUNNING or PENDING exactly as capacity allows, no
device share is given twice, no event is lost, and the containers that ran before the
kill are re-adopted, not started again.
"""

import collections
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from events import SessionRequested, SessionRunning, SessionScheduled, Slots
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from tests.support.cli_stack import FGPU, docker, remove_agent_containers, wait_for_line
from tests.support.docker_env import require_docker
from tests.support.nats_env import create_stream

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.anyio]

AGENT = "crash-agent"
CAPACITY_SESSIONS = 8  # 2 GPUs x 2 fGPU per GPU / 0.5 fGPU per session
BURST = 20


class Actors:
    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        commands = {
            "quota": ["quota"],
            "scheduler": ["scheduler"],
            "agent": [
                "agent",
                "--agent-id",
                AGENT,
                "--mock-gpus",
                "2",
                "--fgpu-per-gpu",
                "2",
                "--cpu",
                "64",
                "--mem",
                "64g",
                "--runtime",
                "docker",
            ],
        }
        for name, args in commands.items():
            log = self.tmp / f"{name}.{self.starts}.log"
            with open(log, "wb") as out:
                self.procs[name] = subprocess.Popen(
                    [FGPU, "--nats", self.url, *args], stdout=out, stderr=subprocess.STDOUT
                )
        for name, p in self.procs.items():
            wait_for_line(self.tmp / f"{name}.{self.starts}.log", "ready", p, 60)

    def kill9(self) -> None:
        for p in self.procs.values():
            os.kill(p.pid, signal.SIGKILL)
        for p in self.procs.values():
            p.wait()

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def actors(tmp_path: Path) -> Iterator[Actors]:
    require_docker()
    with nats_server.nats_server() as server:
        create_stream(server.url)
        a = Actors(server.url, tmp_path)
        try:
            yield a
        finally:
            a.stop()
            remove_agent_containers(AGENT)


def settled(s: ClusterState) -> bool:
    views = list(s.sessions.values())
    running = sum(v.status == "RUNNING" for v in views)
    pending = sum(v.status == "PENDING" for v in views)
    return len(views) == BURST and running == CAPACITY_SESSIONS and pending == BURST - running


async def test_kill_9_every_actor_mid_burst_then_restart(actors: Actors) -> None:
    actors.start()
    events = await connect(actors.url)
    client = Client(events, SystemClock(), "researcher")
    slots = Slots(cpu=100, mem=64 << 20, fgpu=50)
    command = ["sleep", "3600"]
    first = [
        (await client.create(image="fgpu/busybox:latest", slots=slots, command=command))[0]
        for _ in range(BURST // 2)
    ]
    # Mid-burst: as soon as some sessions were placed and one container runs.
    with anyio.fail_after(60):
        before = await client.wait_until(
            lambda s: any(v.status == "RUNNING" for v in s.sessions.values())
        )
    actors.kill9()
    containers_before = {
        v.session_id: v.container_id for v in before.sessions.values() if v.status == "RUNNING"
    }
    rest = [
        (await client.create(image="fgpu/busybox:latest", slots=slots, command=command))[0]
        for _ in range(BURST - len(first))
    ]
    actors.start()
    with anyio.fail_after(120):
        s = await client.wait_until(settled)
    await events.close()

    ids = set(first + rest)
    assert set(s.sessions) == ids  # no request lost
    # No device share given twice, none over capacity; shares match running sessions.
    agent = s.agents[AGENT]
    running = {sid for sid, v in s.sessions.items() if v.status == "RUNNING"}
    shares = collections.Counter()
    for g in agent.gpus.values():
        assert 0 <= g.allocated <= g.capacity
        shares.update(g.shares.keys())
    assert set(shares) == running and all(n == 1 for n in shares.values())
    assert agent.allocated.fgpu == 50 * len(running)
    # Each RUNNING session has exactly one container, running; PENDING ones have none.
    for sid in ids:
        found = docker("ps", "-q", "--filter", f"label=fgpu.session={sid}").split()
        assert len(found) == (1 if sid in running else 0), sid
    # Re-adopted, not restarted: containers running before the kill are the same ones.
    for sid, cid in containers_before.items():
        assert s.sessions[sid].container_id == cid

    # Exactly one placement and one RUNNING report per running session in the log.
    events = await connect(actors.url)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    async for batch in events.read(0):
        for r in batch:
            e = r.event
            if isinstance(e, SessionRequested | SessionScheduled | SessionRunning):
                counts[(type(e).__name__, e.session_id)] += 1
    await events.close()
    for sid in ids:
        assert counts[("SessionRequested", sid)] == 1
        assert counts[("SessionScheduled", sid)] == (1 if sid in running else 0)
        assert counts[("SessionRunning", sid)] == (1 if sid in running else 0)
