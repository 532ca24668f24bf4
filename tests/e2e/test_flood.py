"""A flood cannot hurt anyone else: one user's process publishes requests as fast as it can
while another user asks for a session, on a real server with authentication, the intake
and the actors each on their own keypair.

The other user's session runs while the flood goes on; the server keeps at most the
intake stream's backlog of the flooder's waiting (it refuses the rest); the log gets no
more of the flooder's requests than its key's burst and rate allow, and a few records of
what was dropped instead of one per message. (How long the other user waited, against a
quiet cluster: ``bench/flood.py``; no timing is asserted here.)
"""

import functools
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager

import anyio
import pytest

from events import CreateKeypair, CreateUser, RequestsDropped, SessionRunning, Slots
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters.jetstream_intake import JetStreamSender
from services.adapters.jetstream_stream import INTAKE_BACKLOG
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.tenancy.admin import DEFAULT
from services.wiring.parts import run_intake
from tests.support.tenancy_env import Secured, secured_cluster, start_actors

pytestmark = pytest.mark.anyio
SERVICES = ("intake", "quota", "scheduler", "agent:a1")
RATE, BURST, WINDOW_S = 20.0, 40, 1.0
SMALL = Slots(cpu=1000, mem=1 << 30, fgpu=50)
_FLOODER = """
import asyncio, sys
import nats
from events import SessionDestroyRequested, encode_many
from events import subjects as subj
from services.adapters.system_clock import SystemClock
from services.domain.provenance import Provenance, stamp

async def main(url, key, secret):
    nc = await nats.connect(url, user=key, password=secret, inbox_prefix="_INBOX." + key)
    ask = stamp(SessionDestroyRequested, Provenance(key, SystemClock().now()),
                session_id="nothing", requester=key)
    body, subject, n = encode_many([ask]), subj.intake(key), 0
    while True:
        for _ in range(500):
            await nc.publish(subject, body)
        n += 500
        await nc.flush()
        print(n, flush=True)

asyncio.run(main(*sys.argv[1:4]))
"""


async def _person(c: Secured, name: str) -> tuple[str, str]:
    key, secret = new_access_key(), new_secret()
    for command in (
        CreateUser(user=name, domain=DEFAULT, projects=(DEFAULT,)),
        CreateKeypair(access_key=key, user=name, secret_hash=hash_secret(secret)),
    ):
        await c.setup.append(subj.TENANCY, system_applied(command, SystemClock()))
    return key, secret


@asynccontextmanager
async def _flooded(c: Secured, key: str, secret: str) -> AsyncIterator[subprocess.Popen[str]]:
    flooder = subprocess.Popen(  # noqa: ASYNC220 - started once, never waited on here
        [sys.executable, "-c", _FLOODER, c.url, key, secret], stdout=subprocess.PIPE, text=True
    )
    try:
        assert flooder.stdout is not None
        # Under way: a few thousand published (and the server refusing most of them).
        while int(await anyio.to_thread.run_sync(flooder.stdout.readline) or 0) < 5000:
            if flooder.poll() is not None:
                raise AssertionError(f"the flooder exited {flooder.returncode}")
        yield flooder
    finally:
        flooder.terminate()
        flooder.communicate(timeout=10)  # its output read to the end, the pipe closed


async def test_a_flood_costs_only_the_flooder() -> None:
    async with secured_cluster(services=SERVICES) as c, AsyncExitStack() as stack:
        intake = functools.partial(run_intake, rate=RATE, burst=BURST, window_s=WINDOW_S)
        await start_actors(c, stack, intake=intake)
        eve, eve_secret = await _person(c, "eve")
        ana, ana_secret = await _person(c, "ana")
        before = await c.setup.last_seq()
        ana_log = await c.log_as(ana, ana_secret)
        stack.push_async_callback(ana_log.close)
        ana_client = Client(
            ana_log, SystemClock(), ana, sender=JetStreamSender(ana_log.client, ana)
        )
        t0 = time.monotonic()
        async with _flooded(c, eve, eve_secret) as flooder:
            [sid] = await ana_client.create(image="fgpu/busybox:latest", slots=SMALL)
            with anyio.fail_after(60):
                await _until_running(c, before, sid)
            assert flooder.poll() is None  # it ran while the flood went on
            waiting = await _waiting(c, eve)
        elapsed = time.monotonic() - t0
        assert waiting <= INTAKE_BACKLOG
        # The intake says its drops when their window closes: on a loaded host that can
        # come after ana's session ran, so the log is read until it has said them.
        with anyio.fail_after(WINDOW_S + 30):
            while True:
                written, records = await _flood_on_log(c, before, eve)
                if records:
                    break
                await anyio.sleep(0.2)
        elapsed = time.monotonic() - t0
        dropped = sum(d.rate_limited for d in records)
        # The log: at most the burst and the rate's worth of the flood (and a second's
        # slack for the clocks), and one record of drops a window at most.
        assert written <= BURST + RATE * (elapsed + 1)
        assert 1 <= len(records) <= elapsed / WINDOW_S + 2
        assert dropped > written  # the flood was mostly dropped, not written


async def _flood_on_log(c: Secured, after: int, key: str) -> tuple[int, list[RequestsDropped]]:
    """The flood's requests the log holds after ``after``, and its records of drops."""
    written = 0
    records: list[RequestsDropped] = []
    async for batch in c.setup.read(after):
        written += sum(r.subject.startswith(f"fgpu.req.{key}.") for r in batch)
        records += [
            r.event for r in batch if isinstance(r.event, RequestsDropped) and r.event.owner == key
        ]
    return written, records


async def _until_running(c: Secured, after: int, sid: str) -> None:
    async with aclosing(c.setup.tail(after)) as batches:
        async for batch in batches:
            for r in batch:
                if isinstance(r.event, SessionRunning) and r.event.session_id == sid:
                    return


async def _waiting(c: Secured, key: str) -> int:
    """The flooder's requests the intake stream holds now."""
    body = b'{"subjects_filter": "%s"}' % subj.intake(key).encode()
    reply = await c.setup.nc.request(f"$JS.API.STREAM.INFO.{subj.INTAKE_STREAM}", body, timeout=5)
    subjects = json.loads(reply.data)["state"].get("subjects") or {}
    return int(subjects.get(subj.intake(key), 0))
