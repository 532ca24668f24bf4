"""The scaling part of ``bench/serve.py``: the whole loop, log to proxy, as `fgpu up` runs it.

A real nats-server; registrar, quota, scheduler, the serving actor, one agent and a
router (its health and traffic polled every second, as `fgpu up` has it) over HAProxy,
in this process. The agent's runtime is the dummy one whose inference containers are
model server processes, each on its own loopback address (the engine here has no
network the host reaches). Each replica's own start is from its process spawned until
its ``/health`` answers 200, timed by the runtime.

- **Scale-up reaction**: an endpoint at 1 replica under an autoscaling rule
  (``rps_per_replica``); a closed-loop load starts (the step); ``scale_up_ms`` is until
  the first answer from the new replica, ``scale_up_added_ms`` that less the new
  replica's own start (goal: at most 1,000 ms). In it: the router's next traffic sample,
  the serving actor's decision, scheduling, the agent, the health check and the
  rotation's way back through the log to the proxy.
- **Cold start**: the endpoint at 0 replicas (minimum 0, idle for its cooldown); one
  request, held by HAProxy; ``cold_start_loop_ms`` is until its answer,
  ``cold_start_loop_added_ms`` that less the replica's own start.

Medians over ``tries`` of each.
"""

import json
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import msgspec

from events import (
    AutoscaleRule,
    CreateEndpoint,
    HealthSpec,
    RevisionSpec,
    ServeCommand,
    SetAutoscale,
    Slots,
)
from services.actors.router_service import RouterService
from services.adapters import haproxy_admin as admin
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.haproxy_proxy import HaproxyProxy
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.ports.containers import ContainerInfo, ContainerSpec
from tests.support.cluster import agent_config, running_cluster

__all__ = ["scaling"]

ROOT = Path(__file__).resolve().parents[1]
PORT = 8000
KEY = "AKbench"
IMAGE = "fgpu/busybox:latest"
CHECK = HealthSpec(interval_s=0.2, timeout_s=1.0)
REVISION = RevisionSpec(
    image=IMAGE, port=PORT, slots=Slots(cpu=250, mem=256 << 20, fgpu=25), health=CHECK
)
UP = AutoscaleRule(
    metric="rps_per_replica", up=20, down=5, cooldown_s=1.0, min_replicas=1, max_replicas=2
)
ZERO = msgspec.structs.replace(UP, min_replicas=0, max_replicas=1)
LOAD_CLIENTS = 4


@dataclass
class _Replica:
    process: subprocess.Popen[bytes]
    spawned: float
    healthy: float | None = None


@dataclass
class LocalReplicas:
    """The dummy runtime; each container it runs is also a model server process on its
    own loopback address, named by it (``model`` in its answers)."""

    inner: DummyRuntime = field(default_factory=DummyRuntime)
    replicas: dict[str, _Replica] = field(default_factory=dict)  # by host
    hosts: dict[str, str] = field(default_factory=dict)  # container id -> host
    restarts: int = 0  # scale-up tries begun again: the endpoint scaled before the step
    # A loopback /16 of this run's own (all of 127/8 is loopback): two runs at once on one
    # host must not answer each other's health checks on one fixed address.
    net: int = field(default_factory=lambda: random.randrange(1, 255))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        info = await self.inner.run(spec)
        if info.id not in self.hosts:
            n = len(self.hosts)
            host = f"127.{self.net}.{n // 250}.{n % 250 + 2}"
            self.hosts[info.id] = host
            self.replicas[host] = self._spawn(host)
        return msgspec.structs.replace(info, host=self.hosts[info.id])

    async def list(self, labels: dict[str, str]) -> list[ContainerInfo]:
        found = await self.inner.list(labels)
        return [msgspec.structs.replace(i, host=self.hosts.get(i.id)) for i in found]

    async def remove(self, container_id: str, *, stop_timeout_s: float = 5.0) -> None:
        host = self.hosts.get(container_id)
        if host is not None:
            self.replicas[host].process.terminate()
        await self.inner.remove(container_id, stop_timeout_s=stop_timeout_s)

    def close(self) -> None:
        for r in self.replicas.values():
            r.process.terminate()
            r.process.wait(10)

    def _spawn(self, host: str) -> _Replica:
        env = {"HOST": host, "PORT": str(PORT), "MODEL_NAME": host, "PATH": "/usr/bin:/bin"}
        command = [sys.executable, "-m", "services.model_server"]
        spawned = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        replica = _Replica(process, spawned)
        threading.Thread(target=_time_health, args=(replica, host), daemon=True).start()
        return replica


def _time_health(replica: _Replica, host: str) -> None:
    """When the replica first answers its health: its own start ends."""
    import urllib.request

    while replica.process.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{host}:{PORT}/health", timeout=1) as r:
                if r.status == 200:
                    replica.healthy = time.perf_counter()
                    return
        except OSError:
            time.sleep(0.005)


async def _ask(client: Client, command: ServeCommand) -> None:
    await client.serve(command)


async def _until(client: Client, ok: Callable[[ClusterState], bool]) -> None:
    with anyio.fail_after(60):
        await client.wait_until(ok)


def _replicas(s: ClusterState) -> tuple[int, int]:
    """(wanted, in rotation) of the bench's endpoint."""
    ep = s.serving.endpoints.get("ep-scale")
    if ep is None:
        return (-1, -1)
    return sum(t.replicas for t in ep.targets), sum(r.in_rotation for r in ep.replicas.values())


def _at_zero(s: ClusterState) -> bool:
    """No replica wanted and none left at all (a drained one, out of rotation, may still
    answer until the proxy hears of it: see ``_settled``)."""
    ep = s.serving.endpoints.get("ep-scale")
    return ep is not None and not ep.replicas and _replicas(s)[0] == 0


async def _settled(proxy: HaproxyProxy, runtime: LocalReplicas, replicas: int) -> None:
    """Until HAProxy sends new requests to exactly ``replicas`` servers and as many
    replica processes live: what the log says is not yet what the proxy does (the router
    applies the table after it reads it) nor what runs (a replica drained with no grace
    is stopped as its draining reaches the log). A try begun before would meet the last
    try's replica: taking its requests (a cold start answered by no new replica) or
    refusing them (HAProxy retries a refused connection three times a second apart,
    then answers 503)."""
    with anyio.fail_after(60):  # polls processes we do not control, bounded
        while True:
            if await _serving(proxy, runtime) == (replicas, replicas):
                return
            await anyio.sleep(0.05)


async def _serving(proxy: HaproxyProxy, runtime: LocalReplicas) -> tuple[int, int]:
    """(servers HAProxy sends new requests to, replica processes alive)."""
    rows = admin.stat_rows(await admin.command(_socket(proxy), "show stat -1 4 -1"))
    usable = sum(r["status"] == "UP" and int(r["weight"] or 0) > 0 for r in rows)
    return usable, sum(r.process.poll() is None for r in runtime.replicas.values())


def _socket(proxy: HaproxyProxy) -> str:
    return str(proxy.directory / "admin.sock")


class _Load:
    """Closed-loop clients until stopped; when each replica (by its ``model``) first
    answered."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.first: dict[str, float] = {}
        self.stop = anyio.Event()
        self.answered = anyio.Event()  # set at a replica's first answer
        self.failed = 0
        self.began: float | None = None  # its first request sent

    async def run(self) -> None:
        self.began = time.perf_counter()
        async with aiohttp.ClientSession() as session, anyio.create_task_group() as tg:
            for _ in range(LOAD_CLIENTS):
                tg.start_soon(self._client, session)

    async def _client(self, session: aiohttp.ClientSession) -> None:
        while not self.stop.is_set():
            async with session.get(self.url) as response:
                if response.status != 200:
                    self.failed += 1
                    continue
                body = await response.json(content_type=None)
            if body["model"] not in self.first:
                self.first[body["model"]] = time.perf_counter()
                self.answered.set()
                self.answered = anyio.Event()


async def _scale_up(
    client: Client, runtime: LocalReplicas, url: str, proxy: HaproxyProxy
) -> tuple[float, float]:
    """One step of load from 1 replica: until the new one answers, and its own start."""
    while True:
        await _until(client, lambda s: _replicas(s) == (1, 1))
        await _settled(proxy, runtime, 1)
        ready = time.perf_counter()
        await anyio.sleep(UP.cooldown_s)  # the rule may act: the last change is a cooldown old
        before = set(runtime.replicas)
        if await _serving(proxy, runtime) == (1, 1):
            break
        runtime.restarts += 1  # scaled with no load of ours: a try from there would wait for
        # a replica already come (and, at the rule's maximum, for ever)
    load = _Load(url)
    async with anyio.create_task_group() as tg:
        step, step_at = time.perf_counter(), datetime.now(UTC)
        tg.start_soon(load.run)
        with anyio.move_on_after(60) as waited:
            while not (new := (set(load.first) - before)):
                await load.answered.wait()
        load.stop.set()
    if waited.cancelled_caught:
        raise TimeoutError(await _stuck(client, load, runtime, proxy, step_at, ready, step))
    [host] = new
    r = runtime.replicas[host]
    assert r.healthy is not None
    return load.first[host] - step, r.healthy - r.spawned


async def _stuck(
    client: Client,
    load: _Load,
    runtime: LocalReplicas,
    proxy: HaproxyProxy,
    step: datetime,
    ready: float,
    step_perf: float,
) -> str:
    """What the load saw when no new replica came, and the ``_diagnosis``."""
    return (
        f"no new replica answered in 60 s: answered by {sorted(load.first)}, "
        f"{load.failed} failed, load began {load.began}, ready {ready}, step {step_perf}; "
        + await _diagnosis(client, runtime, proxy, step)
    )


async def _diagnosis(
    client: Client, runtime: LocalReplicas, proxy: HaproxyProxy, step: datetime
) -> str:
    """The endpoint as folded, the replicas spawned and when (seconds from ``step``),
    HAProxy's servers, and the endpoint's events from 20 s before ``step``."""
    ep = (await client.state()).serving.endpoints["ep-scale"]
    replicas = [(r.session_id, r.phase.value, r.in_rotation, r.host) for r in ep.replicas.values()]
    zero = time.perf_counter() - (datetime.now(UTC) - step).total_seconds()
    spawned = {
        h: (round(r.spawned - zero, 2), r.healthy and round(r.healthy - zero, 2))
        for h, r in sorted(runtime.replicas.items())
    }
    servers = await admin.command(_socket(proxy), "show servers state")
    port = proxy.address[1]
    listening = await anyio.run_process(["ss", "-Htlnp", f"sport = :{port}"], check=False)
    return (
        f"targets {ep.targets}, scaled at {ep.scaled_at}, replicas {replicas}, "
        f"spawned and healthy (s from the step) {spawned}; haproxy: {servers!r}; "
        f"listening on {port}: {listening.stdout.decode()!r}; events: "
        + "; ".join(await _timeline(client, step))
    )


_NOISE = {"id", "at", "actor", "causation_id", "correlation_id", "endpoint_id", "type"}


async def _timeline(client: Client, step: datetime) -> list[str]:
    """The bench endpoint's events from 20 s before ``step``: seconds from it, type, data."""
    out = []
    async for batch in client.events.read():
        for record in batch:
            e = record.event
            if getattr(e, "endpoint_id", None) != "ep-scale" or e.at < step - timedelta(seconds=20):
                continue
            said = {k: v for k, v in msgspec.structs.asdict(e).items() if k not in _NOISE}
            out.append(f"{(e.at - step).total_seconds():+.2f} {type(e).__name__} {said}")
    return out


async def _cold_start(
    client: Client, runtime: LocalReplicas, url: str, proxy: HaproxyProxy
) -> tuple[float, float]:
    """From zero: one request until its answer, and the replica's own start."""
    await _until(client, _at_zero)
    await _settled(proxy, runtime, 0)
    before = set(runtime.replicas)
    async with aiohttp.ClientSession() as session:
        started, started_at = time.perf_counter(), datetime.now(UTC)
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=60)) as response:
            text = await response.text()
            took = time.perf_counter() - started
            if response.status != 200:
                raise RuntimeError(
                    f"cold start answered {response.status} after {took:.2f} s: {text[:80]!r}; "
                    + await _diagnosis(client, runtime, proxy, started_at)
                )
            body = json.loads(text)
        took = time.perf_counter() - started
    [host] = set(runtime.replicas) - before
    r = runtime.replicas[host]
    assert r.healthy is not None and body["model"] == host
    return took, r.healthy - r.spawned


async def scaling(proxy: HaproxyProxy, tries: int) -> dict[str, float]:
    """The scale-up and cold-start figures (see the module), medians in ms."""
    runtime = LocalReplicas()
    with nats_server.nats_server() as server:
        log = await connect(server.url)
        try:
            await log.create_or_update_stream()
            agent = [(agent_config("a1"), runtime)]
            async with running_cluster(log, agent), anyio.create_task_group() as tg:  # type: ignore[list-item]
                await tg.start(RouterService(log, SystemClock(), "bench", [proxy]).run)
                client = Client(log, SystemClock(), KEY)
                create = CreateEndpoint(
                    endpoint_id="ep-scale", name="scale", public=True, revision=REVISION
                )
                await _ask(client, create)
                host, port = proxy.address
                url = f"http://{host}:{port}/e/scale/predict?x=1,2"
                await _ask(client, SetAutoscale(endpoint_id="ep-scale", rule=UP))
                ups = []
                for _ in range(tries):
                    ups.append(await _scale_up(client, runtime, url, proxy))
                colds = []
                await _ask(client, SetAutoscale(endpoint_id="ep-scale", rule=ZERO))
                for _ in range(tries):
                    colds.append(await _cold_start(client, runtime, url, proxy))
                tg.cancel_scope.cancel()
        finally:
            await log.close()
            runtime.close()
    return {
        **_figures("scale_up", ups),
        **_figures("cold_start_loop", colds),
        "scale_up_restarted": runtime.restarts,
    }


def _figures(name: str, runs: list[tuple[float, float]]) -> dict[str, float]:
    took = statistics.median(t for t, _ in runs) * 1000
    own = statistics.median(o for _, o in runs) * 1000
    added = statistics.median((t - o) for t, o in runs) * 1000
    return {
        f"{name}_ms": round(took, 1),
        f"{name}_replica_start_ms": round(own, 1),
        f"{name}_added_ms": round(added, 1),
    }
