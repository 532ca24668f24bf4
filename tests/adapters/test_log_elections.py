"""JetStreamLog while a cluster elects a leader, against a scripted JetStream.

A nats-server without JetStream, and a responder on it that answers the log's requests as
a nats-server 2.15 cluster does while it elects a leader (its followers wait 4-9 s of
silence before they vote): nobody takes an append, so it is answered "no responders";
the API is silent, or says JetStream is unavailable (10008); a request that went to the
killed leader is never answered. Then it answers as a cluster with a new leader does.
Each test moves from one phase to the next on the requests it sees, not on time.

What the log must do: wait the election out and carry on (an append stored once, a
question answered), never fail because a leader changed.
"""

import json
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from urllib.parse import urlparse

import anyio
import nats
import pytest
from nats.aio.client import Client, Server
from nats.aio.msg import Msg

from events import subjects as subj
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.nats_client import Reconnects
from tests.support.log_contract import DEADLINE_S, admitted

pytestmark = pytest.mark.anyio

LEDGER = subj.LEDGER
INFO = f"$JS.API.STREAM.INFO.{subj.STREAM}"
UNAVAILABLE = {
    "code": 503,
    "err_code": 10008,
    "description": "JetStream system temporarily unavailable",
}


def stream_info(leader: str, last_seq: int = 0) -> bytes:
    """A stream info answer as the server gives it (the parts the log reads)."""
    return json.dumps(
        {
            "config": {"name": subj.STREAM, "subjects": [subj.STREAM_WILDCARD]},
            "created": "2026-01-01T00:00:00.123456789Z",
            "state": {"messages": last_seq, "bytes": 0, "first_seq": 1, "last_seq": last_seq},
            "cluster": {"name": "fgpu", "leader": leader},
        }
    ).encode()


def ack(seq: int) -> bytes:
    return json.dumps({"stream": subj.STREAM, "seq": seq}).encode()


@pytest.fixture
def plain() -> Iterator[str]:
    """A nats-server with no JetStream: only the test's responder answers ``$JS.API``."""
    port = nats_server.free_port()
    command = [nats_server.find_binary(), "-a", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:  # until it listens, as nats_server.start waits
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait()


@pytest.fixture
async def cluster(plain: str) -> AsyncIterator[Client]:
    """The responder's connection: what it subscribes to, it answers."""
    nc = await nats.connect(plain)
    try:
        yield nc
    finally:
        await nc.close()


@pytest.fixture
async def log(plain: str) -> AsyncIterator[JetStreamLog]:
    events = await connect(plain)
    try:
        yield events
    finally:
        await events.close()


def answering(respond: Callable[[Msg, int], Awaitable[None]]) -> Callable[[Msg], Awaitable[None]]:
    """A callback that hands ``respond`` each request with its number (1, 2, ...)."""
    seen = 0

    async def on(msg: Msg) -> None:
        nonlocal seen
        seen += 1
        await respond(msg, seen)

    return on


async def test_an_append_while_the_stream_elects_is_stored_once_it_has_a_leader(
    cluster: Client, log: JetStreamLog
) -> None:
    stored: list[str] = []

    async def take(msg: Msg) -> None:
        assert msg.headers is not None
        stored.append(msg.headers["Nats-Msg-Id"])
        await msg.respond(ack(len(stored)))

    async def info(msg: Msg, n: int) -> None:
        if n == 3:  # elected: from now on the new leader takes the stream's appends
            await cluster.subscribe(LEDGER, cb=take)
            await cluster.flush()
        await msg.respond(stream_info("n2" if n >= 3 else ""))

    await cluster.subscribe(INFO, cb=answering(info))
    await cluster.flush()
    event = admitted()
    with anyio.fail_after(DEADLINE_S):
        seq = await log.append(LEDGER, event)
    assert (seq, stored) == (1, [event.id])


async def test_an_append_lost_with_its_leader_is_sent_again_and_stored_once(
    cluster: Client, log: JetStreamLog
) -> None:
    stored: dict[str, int] = {}

    async def take(msg: Msg, n: int) -> None:
        if n == 1:
            return  # it went to the leader that was killed: no answer, ever
        assert msg.headers is not None
        seq = stored.setdefault(msg.headers["Nats-Msg-Id"], len(stored) + 1)
        await msg.respond(ack(seq))

    async def info(msg: Msg, n: int) -> None:
        await msg.respond(stream_info("n2"))

    await cluster.subscribe(LEDGER, cb=answering(take))
    await cluster.subscribe(INFO, cb=answering(info))
    await cluster.flush()
    event = admitted()
    # Twice the log's own limit on an answer: a log that waits it out fails, not this.
    with anyio.fail_after(2 * DEADLINE_S):
        seq = await log.append(LEDGER, event)
    assert (seq, stored) == (1, {event.id: 1})


async def test_a_batch_while_the_stream_elects_is_stored_whole_once_it_has_a_leader(
    cluster: Client, log: JetStreamLog
) -> None:
    batches: dict[str, list[str]] = {}

    async def take(msg: Msg) -> None:
        assert msg.headers is not None
        batch = batches.setdefault(msg.headers["Nats-Batch-Id"], [])
        batch.append(msg.headers["Nats-Batch-Sequence"])
        if msg.headers.get("Nats-Batch-Commit"):
            await msg.respond(ack(len(batch)))
        elif msg.reply:
            await msg.respond(b"")

    async def info(msg: Msg, n: int) -> None:
        if n == 2:
            await cluster.subscribe(LEDGER, cb=take)
            await cluster.subscribe(subj.quota("alice"), cb=take)
            await cluster.flush()
        await msg.respond(stream_info("n2" if n >= 2 else ""))

    await cluster.subscribe(INFO, cb=answering(info))
    await cluster.flush()
    items = [(LEDGER, admitted()), (subj.quota("alice"), admitted())]
    with anyio.fail_after(DEADLINE_S):
        await log.append_batch(items, expect_subject=LEDGER, expected_last_subject_seq=0)
    assert list(batches.values()) == [["1", "2"]]


async def test_a_question_answered_unavailable_is_asked_until_answered(
    cluster: Client, log: JetStreamLog
) -> None:
    async def info(msg: Msg, n: int) -> None:
        if n <= 2:  # a server that knows the cluster has no leader says so
            await msg.respond(json.dumps({"error": UNAVAILABLE}).encode())
        elif n > 3:  # one that does not stays silent (the third), then the leader
            await msg.respond(stream_info("n2", last_seq=41))

    await cluster.subscribe(INFO, cb=answering(info))
    await cluster.flush()
    with anyio.fail_after(DEADLINE_S):
        assert await log.last_seq() == 41


def test_a_client_reconnects_first_to_the_servers_it_did_not_just_lose() -> None:
    a, b, c = (Server(uri=urlparse(f"nats://127.0.0.1:{p}")) for p in (4222, 4223, 4224))
    choice = Reconnects(retry_s=60)
    choice.lost("127.0.0.1:4222")
    first, wait_first = choice.next([a, b, c], {})
    second, wait_second = choice.next([a, b, c], {})  # the first did not take it
    third, wait_third = choice.next([a, b, c], {})
    assert (first, wait_first, second, wait_second) == (b, 0.0, c, 0.0)
    assert third is a and wait_third > 0  # every server tried just now: not again at once
