"""JetStreamLog passes the EventLog contract against a real nats-server."""

import contextlib
import io
import json
import socket
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise

import anyio
import anyio.abc
import pytest

from events import AnyEvent, RawBatch, SessionCancelled, encode
from events import subjects as subj
from services.adapters import jetstream_stream, nats_server, raw_reader
from services.adapters.jetstream import JetStreamLog, StreamChange, connect
from services.adapters.jetstream_pull import ack_seqs, ack_time
from services.ports import BulkReadUnavailable, LogError
from tests.support.log_contract import EventLogContract, PublishRaw, admitted
from tests.support.nats_env import fresh_stream

QUOTA = subj.quota("alice")


class TestJetStreamLog(EventLogContract):
    @pytest.fixture
    def events(self, log: JetStreamLog) -> JetStreamLog:
        return log

    @pytest.fixture
    def publish_raw(self, log: JetStreamLog) -> PublishRaw:
        async def publish(subject: str, payload: bytes) -> None:
            await log.nc.publish(subject, payload)
            await log.nc.flush()

        return publish

    @pytest.fixture
    def made_anew(self, log: JetStreamLog) -> Callable[[], Awaitable[JetStreamLog]]:
        async def anew() -> JetStreamLog:
            await fresh_stream(log)  # the stream deleted and created again
            return log

        return anew


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
async def test_a_raw_read_hands_out_every_stored_message_as_it_was_stored(
    log: JetStreamLog, in_child: bool
) -> None:
    """Bytes that look like the protocol, empty payloads, messages with headers (an
    append's dedupe id) and without: every one comes back, in order, byte for byte, in
    batches no larger than asked, whether parsed here or in a child process."""
    stored: list[tuple[str, bytes]] = []
    for n in range(23):
        subject = subj.request("alice", f"s{n}")
        payload = [b"", b"\r\nMSG fgpu.x 1 5\r\nhello\r\n", b"{}" * n, bytes(range(256))][n % 4]
        if n % 3:
            await log.nc.publish(subject, payload)
        else:
            await log.js.publish(subject, payload, headers={"Nats-Msg-Id": f"id-{n}"})
        stored.append((subject, payload))
    await log.nc.flush()
    with anyio.fail_after(10):
        while await log.last_seq() < len(stored):  # noqa: ASYNC110
            await anyio.sleep(0.01)
    got: list[tuple[int, str, bytes]] = []
    sizes = []
    async for raw in log.read_raw(2, until=21, batch=5, child_from=0 if in_child else 1 << 62):
        sizes.append(len(raw.seqs))
        got += zip(raw.seqs, raw.subjects, raw.payloads, strict=True)
        assert _unpacked(raw) == raw.payloads
    assert got == [(seq, *stored[seq - 1]) for seq in range(3, 22)]
    assert max(sizes) <= 5


def _unpacked(raw: RawBatch) -> list[bytes]:
    """The payloads in ``raw.body`` as its offsets cut it."""
    offsets = array("q", raw.offsets)
    assert len(offsets) == len(raw.seqs) + 1
    return [raw.body[a:b] for a, b in pairwise(offsets)]


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
async def test_a_raw_read_hands_out_events_in_their_canonical_encoding(
    log: JetStreamLog, in_child: bool
) -> None:
    """An event stored as some producer wrote it (spaces, keys in another order, escapes)
    comes back as ``encode`` writes it, so a store can keep it as it comes; what is no
    event comes back as stored."""
    event = SessionCancelled(
        id="e1",
        at=datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        actor="alice",
        session_id="s1",
        owner="alice",
        reason='caf\u00e9 "now"',
    )
    fields = json.loads(encode(event))
    written = json.dumps(dict(reversed(fields.items())), indent=2).encode()
    stored = [written, encode(event), b'{"type": "nope.v1"}', b"{not json"]
    for payload in stored:
        await log.nc.publish(subj.request("alice", "s1"), payload)
    await log.nc.flush()
    with anyio.fail_after(10):
        while await log.last_seq() < len(stored):  # noqa: ASYNC110
            await anyio.sleep(0.01)
    got: list[bytes] = []
    async for raw in log.read_raw(0, child_from=0 if in_child else 1 << 62):
        got += raw.payloads
        assert _unpacked(raw) == raw.payloads
    assert written != encode(event)
    assert got == [encode(event), encode(event), *stored[2:]]


@pytest.mark.anyio
async def test_a_raw_read_in_a_child_process_reports_the_childs_failure() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = raw_reader.Source(
        host="127.0.0.1", port=port, stream="S", consumer="c", after=0, end=10, batch=5
    )
    with pytest.raises(LogError, match="cannot reach NATS"):
        async for _ in raw_reader.read_in_child(src):
            pass


@pytest.mark.anyio
async def test_a_slow_raw_reader_of_large_messages_is_not_cut_off(log: JetStreamLog) -> None:
    """The server cuts off a client with more than 64 MB sent and not yet read (a slow
    consumer). A raw read pauses between batches while its caller works: what it asks
    for at once is sized by the payloads, so 120 MB read slowly all arrive."""
    payload = b"x" * 200_000
    for n in range(600):
        await log.nc.publish(subj.request("alice", f"s{n}"), payload)
        if n % 50 == 49:
            await log.nc.flush()
    with anyio.fail_after(30):
        while await log.last_seq() < 600:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    count = 0
    async for seqs, _, payloads, *_ in log.read_raw(0, batch=200):
        count += len(seqs)
        assert all(p == payload for p in payloads)
        await anyio.sleep(1.0)  # a caller folding the batch: the server keeps sending
    assert count == 600


# A scripted server: what a raw read must make of the protocol, byte for byte, whether
# the line is of the usual form (read by one pattern) or not (read by the general path).


def _msg(subject: str, seq: int, payload: bytes, *, header: bytes = b"", reply: str = "") -> bytes:
    """A message as the server delivers one of consumer C of stream S."""
    reply = reply or f"$JS.ACK.S.C.1.{seq}.{seq}.1700000000000000000.0"
    if not header:
        return b"MSG %s 1 %s %d\r\n%s\r\n" % (
            subject.encode(),
            reply.encode(),
            len(payload),
            payload,
        )
    block = b"NATS/1.0\r\n%s\r\n\r\n" % header
    line = b"HMSG %s 1 %s %d %d\r\n" % (
        subject.encode(),
        reply.encode(),
        len(block),
        len(block) + len(payload),
    )
    return line + block + payload + b"\r\n"


@dataclass
class _Server:
    port: int
    answered: anyio.Event = field(default_factory=anyio.Event)  # all sent, every PING answered
    hung_up: anyio.Event = field(default_factory=anyio.Event)


@contextlib.asynccontextmanager
async def _scripted_nats(
    parts: list[bytes],
    *,
    info: bytes = b'{"max_payload":1048576}',
    greeting: bytes = b"PONG\r\n",
) -> AsyncIterator[_Server]:
    """A server on a free port that sends INFO ``info``, answers the client's CONNECT and
    PING with ``greeting``, then sends each part of ``parts``: the next only once the
    client has answered the PING in the one before, so that the client has read that part
    (up to its PING at least) before the next arrives."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    server = _Server(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            await client.send(b"INFO %s\r\n" % info)
            if not await _greeted(client, greeting):
                server.hung_up.set()
                return
            received = b""
            for i, part in enumerate(parts):
                if part:
                    await client.send(part)
                while i + 1 < len(parts) and received.count(b"PONG\r\n") < i + 1:
                    received += await client.receive()
            server.answered.set()
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    await client.receive()
            server.hung_up.set()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield server
        tg.cancel_scope.cancel()


async def _greeted(client: anyio.abc.SocketStream, greeting: bytes) -> bool:
    """Whether the client sent its CONNECT and PING, then answered with ``greeting``; False
    if it hung up first (as a reader does that the INFO told to use TLS)."""
    received = b""
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
        while b"PING\r\n" not in received:
            received += await client.receive()
        await client.send(greeting)
        return True
    return False


def _read(in_child: bool, port: int, *, end: int = 9) -> AsyncIterator[RawBatch]:
    src = raw_reader.Source(
        host="127.0.0.1", port=port, stream="S", consumer="C", after=2, end=end, batch=2
    )
    return raw_reader.read_in_child(src) if in_child else raw_reader.read_stored(src)


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
async def test_a_raw_read_parses_every_form_of_the_protocol(in_child: bool) -> None:
    """Lines and payloads cut across reads, a PING, a status, headers, an empty payload,
    a payload that looks like the protocol, a message stored after the end: every message
    up to the end comes back as it was stored."""
    tricky = _msg("fgpu.x", 9, b"hello")
    stored = [
        _msg("fgpu.a", 3, b'{"n":3}'),
        _msg("fgpu.b", 4, b"", header=b"Nats-Msg-Id: id-4"),
        _msg("fgpu.c", 5, b"\r\n" + tricky + b"PING\r\n"),
        _msg("fgpu.d", 6, b"{}"),
        _msg("fgpu.e", 7, bytes(range(256)) * 4, header=b"Nats-Msg-Id: id-7"),
        _msg("fgpu.f", 8, b"[]"),
        _msg("fgpu.g", 10, b"stored after the read began"),
    ]
    block = b"NATS/1.0 408 Request Timeout\r\n\r\n"
    status = b"HMSG _INBOX.C 1 %d %d\r\n%s\r\n" % (len(block), len(block), block)
    parts = [
        stored[0] + stored[1] + b"PING\r\n" + stored[2][:20],
        stored[2][20:] + status + stored[3] + b"PING\r\n" + stored[4][:-100],
        stored[4][-100:] + stored[5] + stored[6],
    ]
    got: list[tuple[int, str, bytes]] = []
    with anyio.fail_after(30):
        async with _scripted_nats(parts) as server:
            async for seqs, subjects, payloads, *_ in _read(in_child, server.port):
                assert len(seqs) <= 2
                got += zip(seqs, subjects, payloads, strict=True)
    assert got == [
        (3, "fgpu.a", b'{"n":3}'),
        (4, "fgpu.b", b""),
        (5, "fgpu.c", b"\r\n" + tricky + b"PING\r\n"),
        (6, "fgpu.d", b"{}"),
        (7, "fgpu.e", bytes(range(256)) * 4),
        (8, "fgpu.f", b"[]"),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
@pytest.mark.parametrize("header", [b"", b"Nats-Msg-Id: id-9"], ids=["MSG", "HMSG"])
@pytest.mark.parametrize("cut", [0, 20], ids=["whole", "cut"])
async def test_a_raw_read_refuses_a_message_of_another_consumer(
    in_child: bool, header: bytes, cut: int
) -> None:
    """A message on the read's inbox whose reply names consumer OTHER of the stream, its
    line whole in one read or cut across two: the usual pattern does not match it, and the
    general path takes it for none of this read's (its sequence, the end, would end the
    read with 5-8 left out). A LogError, after the batch that came before it."""
    other = "$JS.ACK.S.OTHER.1.9.9.1700000000000000000.0"
    foreign = _msg("fgpu.z", 9, b"{}", header=header, reply=other)
    ours = [_msg(f"fgpu.{n}", n, b"{}", header=header) for n in range(3, 10)]
    parts = [ours[0] + ours[1] + b"PING\r\n" + foreign[:cut], foreign[cut:] + b"".join(ours[2:])]
    got: list[int] = []
    with anyio.fail_after(30):
        async with _scripted_nats(parts) as server:
            with pytest.raises(LogError, match=r"a message not of consumer C: H?MSG fgpu\.z ") as e:
                async for raw in _read(in_child, server.port):
                    got += raw.seqs
    assert got == [3, 4]
    assert not isinstance(e.value, BulkReadUnavailable)  # no reason to read in order instead


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
@pytest.mark.parametrize("header", [b"", b"Nats-Msg-Id: id-9"], ids=["MSG", "HMSG"])
@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.hub.ACCOUNTHASH.S.C.1.5.5.1700000000000000000.0.t0k3n",
        "$JS.ACK.hub.ACCOUNTHASH.S.C.1.5.5.1700000000000000000.0",
        "$JS.ACK.S.C.1.5.5.1700000000000000000",
    ],
    ids=["v2", "v2-without-token", "v1-short"],
)
async def test_a_raw_read_of_replies_in_a_form_it_does_not_parse_is_unavailable(
    in_child: bool, header: bytes, reply: str
) -> None:
    """A message of the read's consumer whose reply is not of the one form the reader
    parses (the v2 acks lead with a domain and an account hash): never misread, it makes
    the read unavailable (the caller reads on in order), after the batch before it."""
    ours = [_msg(f"fgpu.{n}", n, b"{}", header=header) for n in (3, 4)]
    other = _msg("fgpu.5", 5, b"{}", header=header, reply=reply)
    with anyio.fail_after(30):
        async with _scripted_nats([b"".join(ours) + b"PING\r\n", other]) as server:
            got: list[int] = []
            with pytest.raises(BulkReadUnavailable, match="does not parse"):
                async for raw in _read(in_child, server.port):
                    got += raw.seqs
    assert got == [3, 4]


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
async def test_a_raw_read_of_a_server_that_requires_tls_is_unavailable(in_child: bool) -> None:
    info = b'{"max_payload":1048576,"tls_required":true}'
    with anyio.fail_after(30):
        async with _scripted_nats([_msg("fgpu.a", 3, b"{}")], info=info) as server:
            with pytest.raises(BulkReadUnavailable, match="TLS"):
                async for _ in _read(in_child, server.port):
                    pass


@pytest.mark.parametrize(
    ("reply", "seqs"),
    [
        ("$JS.ACK.FGPU.c.1.17.4.1700000000000000000.0", (17, 4)),
        ("$JS.ACK.hub.HASH.FGPU.c.1.17.4.1700000000000000000.0.t0k3n", (17, 4)),
        ("$JS.ACK.hub.HASH.FGPU.c.1.17.4.1700000000000000000.0", (17, 4)),
    ],
    ids=["v1", "v2", "v2-without-token"],
)
def test_a_deliverys_sequences_are_read_from_either_ack_form(
    reply: str, seqs: tuple[int, int]
) -> None:
    assert ack_seqs(reply) == seqs
    assert ack_time(reply) == 1_700_000_000_000_000_000  # when the server stored it


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "_INBOX.x.y",
        "$JS.ACK.FGPU.c.1.x.4.1.0",
        "$JS.ACK.FGPU.c.1.17.4.1",
        "$KV.ACK.a.b.c.1.2.3.4",
    ],
)
def test_a_reply_of_no_known_form_is_a_log_error(reply: str | None) -> None:
    with pytest.raises(LogError, match="no known form"):
        ack_seqs(reply)


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"-ERR 'Authorization Violation'\r\n", "NATS refused a raw read"),
        (b"MSG fgpu.a 1\r\nx\r\n", "unexpected answer from the server"),
        (b"MSG fgpu.a 1 $JS.ACK.S.C.1.3.3.0.0 many\r\n", "unexpected answer from the server"),
    ],
    ids=["refused", "short-line", "no-length"],
)
async def test_a_raw_read_raises_log_error_on_a_refusal_or_garbage(
    in_child: bool, answer: bytes, error: str
) -> None:
    """After a message of the read: the reader was let through, so even a refusal is no
    reason to read in order instead."""
    with anyio.fail_after(30):
        async with _scripted_nats([_msg("fgpu.a", 3, b"{}") + answer]) as server:
            with pytest.raises(LogError, match=error) as e:
                async for _ in _read(in_child, server.port):
                    pass
    assert not isinstance(e.value, BulkReadUnavailable)


REFUSALS = {  # as nats-server words them
    "its-user": "Authorization Violation",
    "too-many-connections": "maximum connections exceeded",
}


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
@pytest.mark.parametrize("refusal", REFUSALS)
async def test_a_server_that_refuses_the_readers_connection_makes_it_unavailable(
    in_child: bool, refusal: str
) -> None:
    """An ``-ERR`` for the reader's CONNECT, at once: the client's own connection was let
    through, so the caller reads in order rather than retrying; the server's words say why."""
    text = REFUSALS[refusal]
    with anyio.fail_after(30):
        async with _scripted_nats([], greeting=b"-ERR '%s'\r\n" % text.encode()) as server:
            with pytest.raises(BulkReadUnavailable, match=text):
                async for _ in _read(in_child, server.port):
                    pass


@pytest.mark.anyio
@pytest.mark.parametrize("in_child", [False, True], ids=["in-process", "child-process"])
async def test_a_server_that_refuses_the_readers_pull_makes_it_unavailable(
    in_child: bool,
) -> None:
    """A connection let through, then refused what it asks before any message came (a
    permission to pull from the consumer's API): the server keeps the connection and sends
    nothing more, so the read ends there rather than waiting."""
    refusal = b"-ERR 'Permissions Violation for Publish to \"$JS.API.CONSUMER.MSG.NEXT.S.C\"'\r\n"
    with anyio.fail_after(30):
        async with _scripted_nats([refusal]) as server:
            with pytest.raises(BulkReadUnavailable, match="Permissions Violation for Publish"):
                async for _ in _read(in_child, server.port):
                    pass


@pytest.mark.anyio
async def test_a_cancelled_raw_read_in_a_child_process_stops_the_child() -> None:
    """The child waits on the server for more when the read is cancelled: the read ends
    at once, and the child with it (the server sees it hang up)."""
    with anyio.fail_after(30):
        async with _scripted_nats([_msg("fgpu.a", 3, b"{}") + b"PING\r\n", b""]) as server:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:

                    async def cancel_once_waiting() -> None:
                        await server.answered.wait()
                        scope.cancel()

                    tg.start_soon(cancel_once_waiting)
                    async for _ in _read(True, server.port):
                        pytest.fail("a batch of 2 came with 1 message sent")
            assert scope.cancelled_caught
            await server.hung_up.wait()


def _frames(*parts: bytes) -> io.BytesIO:
    return io.BytesIO(b"".join(parts))


def test_a_childs_unavailable_frame_is_bulk_read_unavailable() -> None:
    message = b"the server requires TLS"
    with pytest.raises(BulkReadUnavailable, match="requires TLS"):
        raw_reader._receive(_frames(raw_reader._HEAD.pack(b"U", 0, len(message)), message))


def test_a_childs_frame_reads_back_as_its_batch() -> None:
    pieces = raw_reader._frame([3, 4], [b"fgpu.a", b"fgpu.b"], [b"{}", b""])
    raw = raw_reader._receive(_frames(*pieces))
    assert raw is not None
    assert (raw.seqs, raw.subjects, raw.payloads) == ([3, 4], ["fgpu.a", "fgpu.b"], [b"{}", b""])
    assert _unpacked(raw) == raw.payloads


def _corrupt(rest: bytes, count: int = 2) -> io.BytesIO:
    return _frames(raw_reader._HEAD.pack(b"B", count, len(rest)), rest)


@pytest.mark.parametrize(
    "frames",
    [
        # offsets backwards, one past the end, one inside the fixed part; a short rest
        _corrupt(array("q", [3, 4, 45, 43, 47]).tobytes() + b"a\nb" + b"{}{}"),
        _corrupt(array("q", [3, 4, 43, 45, 99]).tobytes() + b"a\nb" + b"{}{}"),
        _corrupt(array("q", [3, 4, 8, 45, 47]).tobytes() + b"a\nb" + b"{}{}"),
        _corrupt(array("q", [3, 4, 43]).tobytes()),
        # a size no child writes, and a frame cut short
        _frames(raw_reader._HEAD.pack(b"B", 2, 1 << 62)),
        _frames(raw_reader._HEAD.pack(b"B", 2, 100), b"short"),
    ],
    ids=["backwards", "past-the-end", "inside-fixed", "short", "huge", "cut"],
)
def test_a_corrupt_frame_from_the_child_is_a_log_error(frames: io.BytesIO) -> None:
    with pytest.raises(LogError):
        raw_reader._receive(frames)


# ---- the stream, an administrator's -----------------------------------------------------


@pytest.mark.anyio
async def test_the_stream_is_created_then_current_then_brought_up_to_date() -> None:
    """An older version's stream (fewer subjects, no atomic batches) refuses what this one
    writes, with a line that says what to do; brought up to date it keeps its messages."""
    with nats_server.nats_server() as server:
        events = await connect(server.url)
        try:
            assert await events.create_or_update_stream() is StreamChange.CREATED
            assert await events.create_or_update_stream() is StreamChange.CURRENT
            older = (await events.js.stream_info(subj.STREAM)).config
            older.subjects = [s for s in subj.STREAM_SUBJECTS if s != "fgpu.usage.>"]
            older.allow_atomic = False
            await events.js.update_stream(older)
            kept = [await events.append(subj.LEDGER, admitted()) for _ in range(2)]
            batch: list[tuple[str, AnyEvent]] = [(subj.LEDGER, admitted()), (QUOTA, admitted())]
            with pytest.raises(LogError, match="takes no atomic batches: an administrator"):
                await events.append_batch(
                    batch, expect_subject=subj.LEDGER, expected_last_subject_seq=2
                )
            with pytest.raises(LogError, match="no stream stores the subject"):
                await events.append(subj.usage("a1", "s1"), admitted())

            assert await events.create_or_update_stream() is StreamChange.UPDATED
            assert await events.create_or_update_stream() is StreamChange.CURRENT
            info = await events.stream_info()
            assert set(info.subjects) == set(subj.STREAM_SUBJECTS)
            assert (info.messages, info.first_seq, info.last_seq) == (2, 1, 2) == (2, *kept)
            assert info.bytes > 0 and info.created.tzinfo is not None
            assert (
                await events.append_batch(
                    batch, expect_subject=subj.LEDGER, expected_last_subject_seq=2
                )
                == 4
            )
            assert await events.append(subj.usage("a1", "s1"), admitted()) == 5
        finally:
            await events.close()


@pytest.mark.anyio
async def test_bringing_the_stream_up_to_date_keeps_an_administrators_settings() -> None:
    """An administrator limited the stream (age, count) and gave it a subject of their own;
    its subjects are an older version's. Brought up to date, it stores this version's
    subjects and keeps all of that."""
    hour_ns = 3600 * 10**9
    with nats_server.nats_server() as server:
        events = await connect(server.url)
        try:
            await events.create_or_update_stream()
            config = (await events.js.stream_info(subj.STREAM)).config
            config.subjects = [*[s for s in subj.STREAM_SUBJECTS if s != "fgpu.usage.>"], "ops.>"]
            config.max_age = 3600.0  # nats-py's seconds: the server's nanoseconds below
            config.max_msgs = 5000
            await events.js.update_stream(config)

            assert await events.create_or_update_stream() is StreamChange.UPDATED
            assert await events.create_or_update_stream() is StreamChange.CURRENT
            data = await events.nc.request(f"$JS.API.STREAM.INFO.{subj.STREAM}", b"")
            kept = json.loads(data.data)["config"]
        finally:
            await events.close()
    assert (kept["max_age"], kept["max_msgs"]) == (hour_ns, 5000)
    assert sorted(kept["subjects"]) == sorted([*subj.STREAM_SUBJECTS, "ops.>"])


@pytest.mark.parametrize(
    ("theirs", "subjects"),
    [
        (["fgpu.sched", "ops.>"], ["fgpu.sched", "ops.>", "fgpu.req.>", "fgpu.sys"]),
        (["fgpu.>"], ["fgpu.>"]),  # a wider subject of theirs stores ours already
        (["fgpu.req.alice.*", "fgpu.sys"], ["fgpu.sys", "fgpu.req.>", "fgpu.sched"]),
        (["fgpu.*"], ["fgpu.*", "fgpu.req.>"]),  # one token only: not fgpu.req.<a>.<b>
        ([], ["fgpu.req.>", "fgpu.sched", "fgpu.sys"]),
    ],
    ids=["theirs-and-ours", "wider", "narrower", "one-token", "none"],
)
def test_an_update_stores_the_subjects_of_both_without_overlap(
    theirs: list[str], subjects: list[str]
) -> None:
    """Every subject of either is stored, by itself or by a wider one; none is stored twice
    (the server refuses subjects that overlap); the administrator's other settings stay."""
    wanted = {"subjects": ["fgpu.req.>", "fgpu.sched", "fgpu.sys"], "allow_atomic": True}
    config = {"subjects": theirs, "allow_atomic": False, "max_age": 60}
    body = jetstream_stream.updated(config, wanted)
    assert body == {"subjects": subjects, "allow_atomic": True, "max_age": 60}
    assert jetstream_stream.holds(body, wanted)
    # Only a subject of theirs that stores all of ours makes theirs enough.
    assert jetstream_stream.holds({**config, "allow_atomic": True}, wanted) == (
        theirs == ["fgpu.>"]
    )


@pytest.mark.anyio
async def test_the_stream_itself_refuses_to_lose_history(log: JetStreamLog) -> None:
    """Whatever a connection's permissions (here: none), the stream refuses a purge and a
    message's deletion: its configuration says so."""
    import nats.js.errors

    seq = await log.append(subj.LEDGER, admitted())
    js = log.nc.jetstream()
    with pytest.raises(nats.js.errors.Error, match=r"(?i)purge"):
        await js.purge_stream(subj.STREAM)
    with pytest.raises(nats.js.errors.Error, match=r"(?i)delete"):
        await js.delete_msg(subj.STREAM, seq)
    assert await log.last_seq() == seq
    assert [r.seq for b in [x async for x in log.read(0)] for r in b] == [seq]


@pytest.mark.anyio
async def test_a_cursor_changed_behind_its_readers_back_is_noticed_and_made_anew(
    log: JetStreamLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service allowed to manage consumers narrows another's filter so that it hears
    nothing more: its reader notices within a quiet pull (here 0.3 s), fails (the actor
    rebuilds), and following again makes the cursor as it should be."""
    from contextlib import aclosing

    from nats.js.api import ConsumerConfig

    from services.adapters.jetstream_pull import Puller

    monkeypatch.setattr(Puller, "_EXPIRES_S", 0.3)
    first = await log.append(subj.LEDGER, admitted())
    async with aclosing(log.follow("victim")) as batches:
        [[r]] = [await anext(batches)]
        assert r.seq == first
        info = await log.js.consumer_info(subj.STREAM, "victim")
        deaf = ConsumerConfig.from_response(info.config.as_dict())
        deaf.filter_subject = "fgpu.nothing.here"
        await log.js.add_consumer(subj.STREAM, deaf)  # an update: same name
        second = await log.append(subj.LEDGER, admitted())
        with anyio.fail_after(10), pytest.raises(LogError, match="was changed"):
            await anext(batches)
    async with aclosing(log.follow("victim", after=first)) as batches:
        with anyio.fail_after(10):
            got = await anext(batches)
    assert [r.seq for r in got] == [second]


@pytest.mark.anyio
async def test_a_long_read_keeps_one_pull_request_outstanding(
    log: JetStreamLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read asks for the next batch once it has the last message of this one, and for
    nothing more when the server then says the batch is complete: a second request there
    doubled the requests outstanding at each batch, the server delivered the whole log
    ahead of the reader, and cut a replay of a long log off as a slow consumer."""
    from services.adapters.jetstream_pull import Puller

    monkeypatch.setattr(Puller, "_BATCH", 50)
    asked = 0
    request = Puller._request

    async def counted(self: Puller) -> None:
        nonlocal asked
        asked += 1
        await request(self)

    monkeypatch.setattr(Puller, "_request", counted)
    payload = encode(admitted())
    for _ in range(1000):
        await log.nc.publish(subj.LEDGER, payload)
    await log.nc.flush()
    with anyio.fail_after(10):
        while await log.last_seq() < 1000:  # noqa: ASYNC110 - the server's count is all there is
            await anyio.sleep(0.01)
    read = [r.seq for b in [x async for x in log.read(0)] for r in b]
    assert read == list(range(1, 1001))
    assert asked <= 1000 // 50 + 1
