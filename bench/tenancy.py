"""Tenancy benchmark: what authentication and four-level policies cost the schedule path.

Runs the schedule bench's throughput part on two clusters up side by side, their rounds
alternated, each on a fresh server:

1. open: nats-server without authentication, no tenancy; quota, scheduler and simulated
   agents (one process each, dummy runtime) connect anonymously; ten owners ask;
2. auth: nats-server with authentication on (the shipped shape: accounts, static users,
   the auth callout answered by the gatekeeper, a process of its own); the intake, quota,
   scheduler and agent host connect with their service keypairs; ten users of one
   project, each with its keypair, hand their requests to the intake (which writes them
   on the log, each key at its rate) through connections of their own; policies are
   set at the four levels (keypair, user, project, domain), generous enough that every
   session is admitted: the cost of checking them is what is measured.

Sessions per second from the first request published to the last RUNNING seen, the
median round of each; their ratio (auth / open). Then the connection cost through the
auth path: a user's keypair connecting again and again (the first pays the scrypt check,
the others find it remembered), time to connected.

Prints one JSON line. Usage: python bench/tenancy.py [--sessions 2000] [--rounds 3] [--agents 400]
"""

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import nats
from rebuild import quantiles_ms  # bench/rebuild.py, beside this file
from schedule import FGPU_PER_GPU, GPUS_PER_AGENT, Observer, ready, spawn, wait_ready

from events import (
    AdminCommand,
    CreateKeypair,
    CreateServiceKey,
    CreateUser,
    PolicyLevel,
    ResourcePolicy,
    SetPolicy,
    Slots,
)
from services.actors.bootstrap import bootstrap
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.jetstream_intake import JetStreamSender
from services.adapters.nats_auth import SETUP_USER, ServerAuth
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.access.permissions import inbox
from services.domain.tenancy.admin import DEFAULT

TEAMS = 10
SERVICES = ("intake", "quota", "scheduler", "agent-host")
SLOTS = Slots(cpu=100, mem=1 << 30, fgpu=100)  # 1 fGPU
_PLENTY = Slots(cpu=10**12, mem=1 << 60, fgpu=10**9)


@dataclass
class Cluster:
    url: str
    admin: JetStreamLog  # reads the log (the observer's connection); the stream's maker
    procs: list[object] = field(default_factory=list)
    users: list[tuple[str, str | None]] = field(default_factory=list)  # key, secret
    spare: tuple[str, str] = ("", "")  # a keypair that never connected: for connect times


def _policies(keys: list[str], users: list[str]) -> list[AdminCommand]:
    per_key = ResourcePolicy(
        max_sessions=10**6,
        max_pending_sessions=10**6,
        max_pending_slots=_PLENTY,
        total_slots=_PLENTY,
        max_priority=100,
    )
    total = ResourcePolicy(total_slots=_PLENTY)
    commands: list[AdminCommand] = [
        SetPolicy(level=PolicyLevel.KEYPAIR, target=k, policy=per_key) for k in keys
    ]
    commands += [
        SetPolicy(
            level=PolicyLevel.USER,
            target=u,
            policy=ResourcePolicy(max_sessions=10**6, total_slots=_PLENTY),
        )
        for u in users
    ]
    commands.append(
        SetPolicy(level=PolicyLevel.PROJECT, target=f"{DEFAULT}/{DEFAULT}", policy=total)
    )
    commands.append(SetPolicy(level=PolicyLevel.DOMAIN, target=DEFAULT, policy=total))
    return commands


@asynccontextmanager
async def open_cluster(agents: int, log_dir: str) -> AsyncIterator[Cluster]:
    with nats_server.nats_server() as server:
        admin = await connect(server.url, name="bench-open")
        await admin.create_or_update_stream()
        c = Cluster(server.url, admin, users=[(f"team{k}", None) for k in range(TEAMS)])
        async with _actors(c, agents, log_dir, "open", []):
            yield c
        await admin.close()


@asynccontextmanager
async def secured_cluster(agents: int, log_dir: str) -> AsyncIterator[Cluster]:
    auth = ServerAuth.generate()
    secrets_dir = Path(log_dir) / "secrets"
    auth.save(secrets_dir)
    server = nats_server.start(config=auth.config())
    try:
        admin = await connect(
            server.url,
            user=SETUP_USER,
            password=auth.setup_password,
            inbox_prefix=inbox(SETUP_USER),
            name="bench-setup",
        )
        await admin.create_or_update_stream()
        services = {s: (new_access_key("SK"), new_secret()) for s in SERVICES}
        users = [(f"team{k}", new_access_key(), new_secret()) for k in range(TEAMS + 1)]
        commands: list[AdminCommand] = [
            CreateServiceKey(access_key=k, service=s, secret_hash=hash_secret(p))
            for s, (k, p) in services.items()
        ]
        for name, key, secret in users:
            commands.append(CreateUser(user=name, domain=DEFAULT, projects=(DEFAULT,)))
            commands.append(
                CreateKeypair(access_key=key, user=name, secret_hash=hash_secret(secret))
            )
        commands += _policies([k for _, k, _ in users], [n for n, _, _ in users])
        assert await bootstrap(admin, SystemClock(), extra=tuple(commands)) is not None
        keys_file = Path(log_dir) / "services.json"
        keys_file.write_text(
            json.dumps({s: {"access_key": k, "secret": p} for s, (k, p) in services.items()})
        )
        os.chmod(keys_file, 0o600)
        c = Cluster(server.url, admin, [], [(k, s) for _, k, s in users[:TEAMS]], users[-1][1:])
        gate = spawn(
            server.url, "gatekeeper", "--secrets", str(secrets_dir), log_dir=log_dir, name="gate"
        )
        try:
            await wait_ready(os.path.join(log_dir, "gate.log"), gate)
            async with _actors(c, agents, log_dir, "auth", ["--service-keys", str(keys_file)]):
                yield c
        finally:
            gate.terminate()
            gate.wait(30)
        await admin.close()
    finally:
        server.stop()


@asynccontextmanager
async def _actors(
    c: Cluster, agents: int, log_dir: str, run: str, extra: list[str]
) -> AsyncIterator[None]:
    sim = ["sim", "agents", "--count", str(agents), "--gpus", str(GPUS_PER_AGENT)]
    sim += ["--fgpu-per-gpu", str(FGPU_PER_GPU)]
    names = {f"{run}-quota": ["quota"], f"{run}-scheduler": ["scheduler"], f"{run}-agents": sim}
    if run == "auth":  # people hand requests to the intake, at their keys' rate
        names[f"{run}-intake"] = ["intake"]
    procs = {n: spawn(c.url, *extra, *args, log_dir=log_dir, name=n) for n, args in names.items()}
    async with ready(procs, log_dir):
        yield


async def throughput(c: Cluster, sessions: int) -> float:
    """Sessions per second: all asked at once by the users, to the last RUNNING."""
    observer = Observer()
    watch = asyncio.create_task(observer.follow(c.admin))
    await asyncio.sleep(1.0)  # the agents' registrations folded by the scheduler first
    logs: list[JetStreamLog] = []
    for key, secret in c.users:
        if secret is None:
            logs.append(c.admin)
        else:
            logs.append(await connect(c.url, user=key, password=secret, inbox_prefix=inbox(key)))
    clients = [
        Client(
            log,
            SystemClock(),
            key,
            sender=None if secret is None else JetStreamSender(log.client, key),
        )
        for log, (key, secret) in zip(logs, c.users, strict=True)
    ]
    per = sessions // len(clients)
    t0 = time.perf_counter()
    ids: list[str] = []
    for client in clients:
        ids += await client.create(image="fgpu/busybox:latest", slots=SLOTS, count=per)
    await observer.wait_for(ids, 600)
    rate = len(ids) / (max(observer.running[i] for i in ids) - t0)
    watch.cancel()
    for log in logs:
        if log is not c.admin:
            await log.close()
    return rate


async def connect_times(c: Cluster, n: int) -> tuple[float, list[float]]:
    """The first connection of a user's keypair (its secret checked by scrypt), and ``n``
    more (remembered), in milliseconds to connected."""
    key, secret = c.spare
    times: list[float] = []
    for _ in range(n + 1):
        t = time.perf_counter()
        nc = await nats.connect(
            c.url, user=key, password=secret, inbox_prefix=inbox(key), allow_reconnect=False
        )
        times.append((time.perf_counter() - t) * 1000)
        await nc.close()
    return times[0], sorted(times[1:])


async def main(args: argparse.Namespace) -> dict[str, object]:
    """Both clusters up at once, their rounds alternated (open, auth, open, ...): a noisy
    machine then weighs on both alike; the median round of each is compared."""
    log_dir = tempfile.mkdtemp(prefix="fgpu-bench-tenancy-")
    rates: dict[str, list[float]] = {"open": [], "auth": []}
    async with (
        open_cluster(args.agents, log_dir) as plain,
        secured_cluster(args.agents, log_dir) as secured,
    ):
        for _ in range(args.rounds):
            rates["open"].append(await throughput(plain, args.sessions))
            rates["auth"].append(await throughput(secured, args.sessions))
        first, again = await connect_times(secured, args.connects)
    open_rate, auth_rate = (statistics.median(rates[k]) for k in ("open", "auth"))
    q = quantiles_ms(again)
    return {
        "bench": "tenancy",
        "sessions": args.sessions // TEAMS * TEAMS,
        "rounds": args.rounds,
        "agents": args.agents,
        "open_sessions_per_s": round(open_rate, 1),
        "auth_sessions_per_s": round(auth_rate, 1),
        "ratio_sessions_per_s_auth_to_open": round(auth_rate / open_rate, 3),
        "rounds_sessions_per_s": {k: [round(r) for r in v] for k, v in rates.items()},
        "connect_first_ms": round(first, 2),
        "connects": len(again),
        "connect_ms_p50": q["p50_ms"],
        "connect_ms_p99": q["p99_ms"],
        "logs": log_dir,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=2000, help="per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", type=int, default=400)
    parser.add_argument("--connects", type=int, default=200)
    args = parser.parse_args()
    room = args.agents * GPUS_PER_AGENT * FGPU_PER_GPU
    if args.sessions * args.rounds > room:
        parser.error(
            f"{args.rounds} rounds of {args.sessions} sessions of 1 fGPU (they never end) "
            f"do not fit on {room} fGPU: add agents"
        )
    print(json.dumps(asyncio.run(main(args))))
