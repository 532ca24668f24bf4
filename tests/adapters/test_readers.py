"""Reader keypairs, for integrations: who may make one, what each reads (the whole log, or
one domain's part of it, through a consumer of its own that the gatekeeper makes), and
that it does nothing else: it may not make, change or remove a consumer, hear another's,
publish anything but its acknowledgements, or have one stored where the log is. On a real
server with authentication, the gatekeeper, the intake, the actors and the domain feed
each on its own keypair, and the example of docs/integrations.md as an integration runs it.
"""

import json
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.errors
import pytest

from events import (
    AdminCommand,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateServiceKey,
    CreateUser,
    RevokeKeypair,
    Role,
    SessionRunning,
    Slots,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters.jetstream_intake import JetStreamSender
from services.adapters.nats_auth import GATE_USER
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.access.permissions import inbox
from services.domain.tenancy.admin import apply, refusal
from services.domain.tenancy.model import Tenancy
from tests.support.tenancy_env import Secured, secured_cluster, start_actors

pytestmark = pytest.mark.anyio
SERVICES = ("intake", "quota", "scheduler", "agent:a1", "domain-feed")
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "reader.py"
SMALL = Slots(cpu=1000, mem=1 << 30, fgpu=50)


# ---- who may make a reader (pure) ------------------------------------------------------


def _tenancy() -> Tenancy:
    t = Tenancy()
    for c in (
        CreateDomain(domain="lab"),
        CreateDomain(domain="other"),
        CreateProject(domain="lab", project="a"),
        CreateUser(user="root", domain="lab", role=Role.SUPERADMIN),
        CreateUser(user="boss", domain="lab", role=Role.DOMAIN_ADMIN),
        CreateUser(user="ana", domain="lab", projects=("a",)),
        CreateKeypair(access_key="AKroot", user="root", secret_hash="-"),
        CreateKeypair(access_key="AKboss", user="boss", secret_hash="-"),
        CreateKeypair(access_key="AKana", user="ana", secret_hash="-"),
        CreateServiceKey(access_key="RKlab", service="reader:lab", secret_hash="-"),
        CreateServiceKey(access_key="RKother", service="reader:other", secret_hash="-"),
    ):
        apply(t, c)
    return t


@pytest.mark.parametrize(
    ("requester", "service", "allowed"),
    [
        ("AKroot", "reader", True),
        ("AKroot", "reader:other", True),
        ("AKboss", "reader:lab", True),  # its own domain's
        ("AKboss", "reader:other", False),
        ("AKboss", "reader", False),  # the whole log: a superadmin's alone
        ("AKboss", "quota", False),  # no service
        ("AKana", "reader:lab", False),
        ("AKroot", "reader:nowhere", False),  # no such domain
    ],
)
def test_who_may_make_a_reader(requester: str, service: str, allowed: bool) -> None:
    c = CreateServiceKey(access_key="RKnew", service=service, secret_hash="-")
    assert (refusal(_tenancy(), requester, c) is None) is allowed


@pytest.mark.parametrize(
    ("requester", "key", "allowed"),
    [("AKboss", "RKlab", True), ("AKboss", "RKother", False), ("AKana", "RKlab", False)],
)
def test_who_may_revoke_a_reader(requester: str, key: str, allowed: bool) -> None:
    c = RevokeKeypair(access_key=key)
    assert (refusal(_tenancy(), requester, c) is None) is allowed


# ---- on a real server ----------------------------------------------------------------------


@dataclass
class World:
    c: Secured
    keys: dict[str, tuple[str, str]]  # name -> access key, secret
    sessions: dict[str, str]  # person -> its session


async def _apply(c: Secured, *commands: AdminCommand) -> None:
    for command in commands:
        await c.setup.append(subj.TENANCY, system_applied(command, SystemClock()))


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def world() -> AsyncIterator[World]:
    async with secured_cluster(services=SERVICES) as c, AsyncExitStack() as stack:
        keys = {n: (new_access_key(), new_secret()) for n in ("ana", "olga")}
        keys |= {n: (new_access_key("RK"), new_secret()) for n in ("all", "lab", "gone")}
        await _apply(
            c,
            CreateDomain(domain="lab"),
            CreateDomain(domain="other"),
            CreateProject(domain="lab", project="a"),
            CreateProject(domain="other", project="x"),
            CreateUser(user="ana", domain="lab", projects=("a",)),
            CreateUser(user="olga", domain="other", projects=("x",)),
            *(
                CreateKeypair(access_key=keys[n][0], user=n, secret_hash=hash_secret(keys[n][1]))
                for n in ("ana", "olga")
            ),
            *(
                CreateServiceKey(
                    access_key=keys[n][0], service=service, secret_hash=hash_secret(keys[n][1])
                )
                for n, service in (("all", "reader"), ("lab", "reader:lab"), ("gone", "reader:lab"))
            ),
        )
        await start_actors(c, stack)
        sessions = {}
        for person in ("ana", "olga"):
            log = await c.log_as(*keys[person])
            stack.push_async_callback(log.close)
            key = keys[person][0]
            client = Client(log, SystemClock(), key, sender=JetStreamSender(log.client, key))
            [sessions[person]] = await client.create(image="fgpu/busybox:latest", slots=SMALL)
        with anyio.fail_after(30):
            await _running(c, set(sessions.values()))
        yield World(c, keys, sessions)


async def _running(c: Secured, sids: set[str]) -> None:
    async with aclosing(c.setup.tail(0)) as batches:
        async for batch in batches:
            for r in batch:
                if isinstance(r.event, SessionRunning):
                    sids.discard(r.event.session_id)
            if not sids:
                return


async def _reader(w: World, name: str, **options: Any) -> nats.NATS:
    key, secret = w.keys[name]
    return await w.c.connect(user=key, password=secret, inbox_prefix=inbox(key), **options)


async def _heard(nc: nats.NATS, key: str, until: str) -> list[dict[str, Any]]:
    """What the reader's consumer delivers (acknowledged), until an event naming ``until``
    arrives; each as its subject and payload."""
    found: list[dict[str, Any]] = []
    done = anyio.Event()

    async def on_msg(msg: Any) -> None:
        found.append({"subject": msg.subject, "payload": msg.data.decode()})
        await msg.ack()
        if until in msg.data.decode() and "session.running" in msg.data.decode():
            done.set()

    sub = await nc.subscribe(subj.reader_out(key), cb=on_msg)
    with anyio.fail_after(30):
        await done.wait()
    await sub.unsubscribe()
    return found


async def test_the_example_reads_the_whole_log_in_order(world: World) -> None:
    key, secret = world.keys["all"]
    count = await world.c.setup.last_seq()
    p = await anyio.run_process(
        [sys.executable, str(EXAMPLE), world.c.url, key, secret, "--count", str(count)],
        check=False,
    )
    assert p.returncode == 0, p.stderr.decode()
    lines = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, count + 1))
    assert {world.sessions["ana"], world.sessions["olga"]} <= {
        line.get("session_id") for line in lines
    }


async def test_a_domain_reader_reads_its_domains_part_alone(world: World) -> None:
    lab_key = world.keys["lab"][0]
    nc = await _reader(world, "lab")
    try:
        heard = await _heard(nc, lab_key, world.sessions["ana"])
    finally:
        await nc.close()
    text = "\n".join(h["payload"] for h in heard)
    assert world.sessions["ana"] in text and world.keys["ana"][0] in text
    for foreign in (world.sessions["olga"], world.keys["olga"][0], '"other"', "olga"):
        assert foreign not in text, foreign
    assert all(h["subject"].startswith(subj.domain_feed("lab", "")) for h in heard)


async def test_a_reader_may_do_nothing_else(world: World) -> None:
    key = world.keys["lab"][0]
    other = world.keys["all"][0]
    errors: list[str] = []
    more = anyio.Event()

    async def told(e: Exception) -> None:
        nonlocal more
        errors.append(str(e))
        more.set()
        more = anyio.Event()

    nc = await _reader(world, "lab", error_cb=told)
    before = await world.c.stored_since(0)
    try:
        denied_pub = [
            f"$JS.API.CONSUMER.CREATE.{subj.DOMAINS_STREAM}.{key}.fgpu.d.>",  # widen its own
            f"$JS.API.CONSUMER.CREATE.{subj.DOMAINS_STREAM}.{key}",
            f"$JS.API.CONSUMER.CREATE.{subj.STREAM}",
            f"$JS.API.CONSUMER.DELETE.{subj.DOMAINS_STREAM}.{key}",
            f"$JS.API.CONSUMER.MSG.NEXT.{subj.STREAM}.{other}",
            f"$JS.ACK.{subj.STREAM}.{other}.1.1.1.1.0",  # another reader's acknowledgements
            subj.intake(key),
            subj.LEDGER,
        ]
        for subject in denied_pub:
            await nc.publish(subject, b"{}", reply=f"{inbox(key)}.x")
        denied_sub = [subj.reader_out(other), "fgpu.>", ">"]
        for subject in denied_sub:
            await nc.subscribe(subject)
        await nc.flush()
        wanted = [f'publish to "{s.lower()}"' for s in denied_pub]
        wanted += [f'subscription to "{s.lower()}"' for s in denied_sub]
        with anyio.fail_after(10):
            while not all(any(w in e for e in errors) for w in wanted):
                await more.wait()
        # An acknowledgement aimed at the ledger: the reader's account holds no stream.
        got = anyio.Event()
        reply: list[str] = []

        async def on_msg(msg: Any) -> None:
            reply.append(msg.reply)
            got.set()

        sub = await nc.subscribe(subj.reader_out(key), cb=on_msg)
        with anyio.fail_after(30):
            await got.wait()
        await sub.unsubscribe()
        await nc.publish(reply[0], b"+ACK", reply=subj.LEDGER)
        await nc.flush()
    finally:
        await nc.close()
    fence = await world.c.setup.last_seq()
    after = await world.c.stored_since(0)
    assert after[: len(before)] == before
    assert subj.LEDGER not in after[len(before) :], "an acknowledgement stored on the ledger"
    assert fence >= len(before)


async def test_a_revoked_reader_loses_its_consumer_and_its_connections(world: World) -> None:
    key = world.keys["gone"][0]
    closed = anyio.Event()

    async def on_close() -> None:
        closed.set()

    nc = await _reader(world, "gone", closed_cb=on_close, disconnected_cb=on_close)
    # Who may look at readers' consumers: the gatekeeper's static user, which makes them.
    gate = await world.c.connect(
        user=GATE_USER, password=world.c.auth.gate_password, inbox_prefix=inbox(GATE_USER)
    )
    info = f"$JS.API.CONSUMER.INFO.{subj.DOMAINS_STREAM}.{key}"
    try:
        assert "error" not in json.loads((await gate.request(info, b"")).data)
        await _apply(world.c, RevokeKeypair(access_key=key))
        with anyio.fail_after(15):
            await closed.wait()
            for _ in range(300):  # the gatekeeper removes it once it has folded the revocation
                if "error" in json.loads((await gate.request(info, b"")).data):
                    break
                await anyio.sleep(0.05)
        assert "error" in json.loads((await gate.request(info, b"")).data)
    finally:
        await gate.close()
    await nc.close()
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await _reader(world, "gone")
