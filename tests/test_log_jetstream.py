"""JetStreamLog passes the EventLog contract against a real nats-server."""

import socket
from collections.abc import AsyncIterator

import anyio
import pytest
from log_contract import EventLogContract, PublishRaw

from events import subjects as subj
from services.adapters import raw_reader
from services.adapters.jetstream import JetStreamLog
from services.ports import LogError


class TestJetStreamLog(EventLogContract):
    @pytest.fixture
    async def events(self, log: JetStreamLog) -> AsyncIterator[JetStreamLog]:
        # The ``log`` fixture deletes and creates the stream, but a file stream created again
        # at once can come back with the deleted one's messages (seen with nats-server 2.15): the
        # contract counts from sequence 1, so make sure it does.
        for _ in range(20):
            if await log.last_seq() == 0:
                yield log
                return
            await log.js.delete_stream(subj.STREAM)
            await log.ensure_stream()
        pytest.fail("the stream kept its messages through 20 deletions")

    @pytest.fixture
    def publish_raw(self, log: JetStreamLog) -> PublishRaw:
        async def publish(subject: str, payload: bytes) -> None:
            await log.nc.publish(subject, payload)
            await log.nc.flush()

        return publish


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
    async for seqs, subjects, payloads in log.read_raw(
        2, until=21, batch=5, child_from=0 if in_child else 1 << 62
    ):
        sizes.append(len(seqs))
        got += zip(seqs, subjects, payloads, strict=True)
    assert got == [(seq, *stored[seq - 1]) for seq in range(3, 22)]
    assert max(sizes) <= 5


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
    async for seqs, _, payloads in log.read_raw(0, batch=200):
        count += len(seqs)
        assert all(p == payload for p in payloads)
        await anyio.sleep(1.0)  # a caller folding the batch: the server keeps sending
    assert count == 600
