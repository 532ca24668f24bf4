"""JetStreamLog when its server or its stream is not there: only the log port's errors.

Every kind of call meets a server stopped before it starts, one stopped in its middle (as
it sends a request, between the messages of an atomic batch, at an acknowledgement, or
while it waits for messages), and a server with no stream. Whatever nats-py, the socket or
JetStream raise, what comes out is LogError (StreamMissing where the stream is missing),
and every wait is bounded by ``anyio.fail_after``: nothing hangs.
"""

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import pytest

from events import AnyEvent, RawBatch
from events import subjects as subj
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.ports import LogError, StreamMissing
from tests.support.log_contract import DEADLINE_S, admitted
from tests.support.nats_env import Stoppable, Trigger

pytestmark = pytest.mark.anyio

STORED = 3  # events on the ledger before each test's call: 1, 2, 3
LEDGER = subj.LEDGER
QUOTA = subj.quota("alice")


@dataclass
class Doomed(Stoppable):
    """A log on a server of its own, which the test stops."""

    log: JetStreamLog


@pytest.fixture
async def doomed(server: nats_server.NatsServer) -> AsyncIterator[Doomed]:
    events = await connect(server.url)
    try:
        await events.create_or_update_stream()
        for _ in range(STORED):
            await events.append(LEDGER, admitted())
        yield Doomed(server, events.nc, events)
    finally:
        with anyio.fail_after(DEADLINE_S):
            await events.close()


async def _drain(batches: AsyncGenerator[Any, None]) -> int:
    """Read ``batches`` to their end; how many records (or raw messages) came."""
    got = 0
    async with aclosing(batches) as it:
        async for batch in it:
            got += len(batch.seqs) if isinstance(batch, RawBatch) else len(batch)
    return got


def _batch() -> list[tuple[str, AnyEvent]]:
    return [(LEDGER, admitted()), (QUOTA, admitted()), (QUOTA, admitted()), (LEDGER, admitted())]


Call = Callable[[JetStreamLog], Awaitable[object]]
# Every public call of the log, as a test runs it: reads to their end (a read past the
# stored end, a tail and a follow would wait for more; here they meet the failure first).
CALLS: dict[str, Call] = {
    "append": lambda log: log.append(LEDGER, admitted()),
    "append_batch": lambda log: log.append_batch(
        _batch(), expect_subject=LEDGER, expected_last_subject_seq=STORED
    ),
    "append_many": lambda log: log.append_many([(LEDGER, admitted()) for _ in range(3)]),
    "last_seq": lambda log: log.last_seq(),
    "count": lambda log: log.count(LEDGER),
    "read": lambda log: _drain(log.read(0)),
    "tail": lambda log: _drain(log.tail(0)),
    "follow": lambda log: _drain(log.follow("worker")),
    "delete_consumer": lambda log: log.delete_consumer("worker"),
    "read_raw": lambda log: _drain(log.read_raw(0)),
    "read_raw_in_child": lambda log: _drain(log.read_raw(0, child_from=0)),
    "create_or_update_stream": lambda log: log.create_or_update_stream(),
    "stream_info": lambda log: log.stream_info(),
}


@pytest.mark.parametrize("call", CALLS)
async def test_a_call_after_the_server_went_raises_log_error(doomed: Doomed, call: str) -> None:
    await doomed.gone()
    with anyio.fail_after(DEADLINE_S), pytest.raises(LogError, match="connection to NATS"):
        await CALLS[call](doomed.log)


# When the server stops: as the client publishes a message for which the Trigger holds,
# given its subject and headers (``Stoppable.stop_on_publish``).


def _subject(prefix: str) -> Trigger:
    return lambda subject, _: subject.startswith(prefix)


def _nth_to_the_stream(n: int) -> Trigger:
    seen = 0

    def when(subject: str, _: dict[str, str]) -> bool:
        nonlocal seen
        seen += subject.startswith("fgpu.")
        return seen == n

    return when


DURING: dict[str, tuple[Call, Trigger]] = {
    "append": (CALLS["append"], _subject(LEDGER)),
    "append_batch between its messages": (
        CALLS["append_batch"],
        lambda _, headers: headers.get("Nats-Batch-Sequence") == "2",
    ),
    "append_batch at its commit": (
        CALLS["append_batch"],
        lambda _, headers: headers.get("Nats-Batch-Commit") == "1",
    ),
    "append_many between its messages": (CALLS["append_many"], _nth_to_the_stream(2)),
    "last_seq": (CALLS["last_seq"], _subject("$JS.API.STREAM.INFO.")),
    "count": (CALLS["count"], _subject("$JS.API.STREAM.INFO.")),
    "read at its start": (CALLS["read"], _subject("$JS.API.CONSUMER.CREATE.")),
    "tail at its start": (CALLS["tail"], _subject("$JS.API.CONSUMER.CREATE.")),
    "follow at its consumer": (CALLS["follow"], _subject("$JS.API.CONSUMER.INFO.")),
    "follow at its pull request": (CALLS["follow"], _subject("$JS.API.CONSUMER.MSG.NEXT.")),
    "follow at its acknowledgement": (CALLS["follow"], _subject("$JS.ACK.")),
    "delete_consumer": (CALLS["delete_consumer"], _subject("$JS.API.CONSUMER.DELETE.")),
    "read_raw at its consumer": (CALLS["read_raw"], _subject("$JS.API.CONSUMER.CREATE.")),
    "create_or_update_stream": (
        CALLS["create_or_update_stream"],
        _subject("$JS.API.STREAM.INFO."),
    ),
    "stream_info": (CALLS["stream_info"], _subject("$JS.API.STREAM.INFO.")),
}


@pytest.mark.parametrize("case", DURING)
async def test_a_call_whose_server_stops_in_its_middle_raises_log_error(
    doomed: Doomed, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    call, when = DURING[case]
    doomed.stop_on_publish(monkeypatch, when)
    with anyio.fail_after(DEADLINE_S), pytest.raises(LogError):
        await call(doomed.log)
    assert doomed.server.process.poll() is not None, "the trigger never fired"


# Reads that wait for more: past the end stored, a tail, a durable cursor, the bulk reader
# on its own socket (in this process and in a child). Each has handed out what is stored,
# and waits for more, when the server stops.
WAITING: dict[str, Callable[[JetStreamLog], AsyncGenerator[Any, None]]] = {
    "read past the end": lambda log: log.read(0, until=STORED + 5),
    "tail": lambda log: log.tail(0),
    "follow": lambda log: log.follow("worker"),
    "read_raw": lambda log: log.read_raw(0, until=STORED + 5, batch=1),
    "read_raw in a child": lambda log: log.read_raw(0, until=STORED + 5, batch=1, child_from=0),
}


@pytest.mark.parametrize("read", WAITING)
async def test_a_read_waiting_when_the_server_stops_raises_log_error(
    doomed: Doomed, read: str
) -> None:
    stored = anyio.Event()
    got: list[int] = []
    raised: list[LogError] = []

    async def reader() -> None:
        try:
            async with aclosing(WAITING[read](doomed.log)) as batches:
                async for batch in batches:
                    seqs = batch.seqs if isinstance(batch, RawBatch) else [r.seq for r in batch]
                    got.extend(seqs)
                    if len(got) >= STORED:
                        # Set before asking for more: the stopping task runs once the
                        # reader waits, so the stop finds it waiting.
                        stored.set()
        except LogError as e:  # anything else fails the test, out of the task group
            raised.append(e)

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await stored.wait()
            await doomed.stop()
    assert got == [1, 2, 3]
    assert len(raised) == 1


async def test_closing_after_the_server_went_raises_nothing(doomed: Doomed) -> None:
    await doomed.gone()
    with anyio.fail_after(DEADLINE_S):
        await doomed.log.close()
    assert doomed.log.nc.is_closed


async def test_connecting_to_no_server_raises_log_error() -> None:
    port = nats_server.free_port()  # nobody listens on it
    with anyio.fail_after(DEADLINE_S), pytest.raises(LogError, match="cannot connect to NATS"):
        await connect(f"nats://127.0.0.1:{port}")


async def test_a_connect_cancelled_midway_leaves_no_socket_open() -> None:
    """A task group cancelled while a service connects (the shutdown path) closes the
    socket nats-py had opened: left open, the garbage collector found it after the event
    loop had closed, and its ResourceWarning failed whichever later test was running. The
    listener answers nothing, so the connect is held between its socket and the server's
    INFO until cancelled; the listener then sees the client's end of the socket."""
    accepted, hung_up = anyio.Event(), anyio.Event()

    async def silent(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            accepted.set()
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await stream.receive()  # the client says nothing before the server's INFO
            hung_up.set()

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, silent)
            with anyio.fail_after(DEADLINE_S):
                async with anyio.create_task_group() as connecting:
                    connecting.start_soon(connect, f"nats://127.0.0.1:{port}")
                    await accepted.wait()
                    connecting.cancel_scope.cancel()
                await hung_up.wait()
            tg.cancel_scope.cancel()


# ---- no stream --------------------------------------------------------------------------

NO_STREAM = (
    f"no stream {subj.STREAM} on this server: an administrator creates it with 'fgpu stream create'"
)


@pytest.fixture
async def bare(server: nats_server.NatsServer) -> AsyncIterator[JetStreamLog]:
    """A log on a server where nobody has created the stream."""
    events = await connect(server.url)
    yield events
    await events.close()


@pytest.mark.parametrize("call", [c for c in CALLS if c != "create_or_update_stream"])
async def test_every_call_without_the_stream_says_so_in_one_line(
    bare: JetStreamLog, call: str
) -> None:
    with anyio.fail_after(DEADLINE_S), pytest.raises(StreamMissing) as raised:
        await CALLS[call](bare)
    assert str(raised.value) == NO_STREAM


async def test_a_subject_no_stream_stores_is_not_a_missing_stream(log: JetStreamLog) -> None:
    with pytest.raises(LogError) as raised:
        await log.append("elsewhere.x", admitted())
    assert not isinstance(raised.value, StreamMissing)
    assert "no stream stores the subject" in str(raised.value)
