"""The raw reader's protocol without a socket (``raw_reader.Protocol``): the server's
bytes in, however they are cut, give the same messages in order and the same answers
(PONGs, pulls); a refusal before the read's first message is BulkReadUnavailable, after
it a LogError; a reply of another form is never misread."""

import pytest

from services.adapters.raw_reader import Protocol, Source
from services.ports import BulkReadUnavailable, LogError

SRC = Source(host="h", port=1, stream="FGPU", consumer="c", after=0, end=3, batch=2)
ACK = b"$JS.ACK.FGPU.c"


def msg(seq: int, payload: bytes, subject: bytes = b"fgpu.a") -> bytes:
    reply = b"%s.1.%d.%d.1700000000000000000.0" % (ACK, seq, seq)
    return b"MSG %s 1 %s %d\r\n%s\r\n" % (subject, reply, len(payload), payload)


def hmsg(seq: int, payload: bytes) -> bytes:
    """A message with headers, which the read skips."""
    headers = b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n"
    reply = b"%s.1.%d.%d.17000000000000000001.0" % (ACK, seq, seq)
    total = len(headers) + len(payload)
    return b"HMSG fgpu.h 1 %s %d %d\r\n%s%s\r\n" % (reply, len(headers), total, headers, payload)


STATUS = b"HMSG _INBOX.c 1 28 28\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n"


def run(stream: bytes, cut: int, src: Source = SRC) -> tuple[list[tuple[object, ...]], bytes]:
    """``stream`` fed ``cut`` bytes at a time: the batches, and all that was answered."""
    p = Protocol(src, largest=100)
    sent = p.start()
    batches: list[tuple[object, ...]] = []
    for i in range(0, len(stream), cut):
        sent += p.feed(stream[i : i + cut])
        batches += [tuple(b) for b in p.batches()]
    return batches, sent


WHOLE = msg(1, b'{"a":1}') + b"PING\r\n" + STATUS + hmsg(2, b"{}") + msg(3, b"") + msg(4, b"x")


@pytest.mark.parametrize("cut", [1, 2, 7, 64, len(WHOLE)])
def test_however_the_bytes_are_cut_the_messages_and_answers_are_the_same(cut: int) -> None:
    batches, sent = run(WHOLE, cut)
    assert batches == [
        ([1, 2], [b"fgpu.a", b"fgpu.h"], [b'{"a":1}', b"{}"]),
        ([3], [b"fgpu.a"], [b""]),  # the 4th was stored after the read began: dropped
    ]
    assert sent.startswith(b"SUB _INBOX.c 1\r\nPUB $JS.API.CONSUMER.MSG.NEXT.FGPU.c _INBOX.c ")
    assert sent.count(b"PONG\r\n") == 1
    # Two pulls at the start, and more once what was asked for ran low or a pull ended.
    assert sent.count(b"PUB $JS.API.CONSUMER.MSG.NEXT.FGPU.c") > 2


def test_a_pull_that_ended_short_is_asked_afresh() -> None:
    p = Protocol(SRC, largest=100)
    p.start()
    assert b"MSG.NEXT" in p.feed(STATUS)


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        (b"-ERR 'Permissions Violation'\r\n", BulkReadUnavailable),
        (msg(1, b"{}") + b"-ERR 'Permissions Violation'\r\n", LogError),
    ],
)
def test_a_refusal_is_unavailable_before_the_first_message_and_an_error_after(
    stream: bytes, error: type[LogError]
) -> None:
    with pytest.raises(LogError) as raised:
        run(stream, len(stream))
    assert type(raised.value) is error


def test_a_reply_of_another_form_is_never_misread() -> None:
    v2 = b"$JS.ACK.dom.hash.FGPU.c.1.1.1.1700000000000000000.0.token"
    stream = b"MSG fgpu.a 1 %s 2\r\n{}\r\n" % v2
    with pytest.raises(BulkReadUnavailable):
        run(stream, len(stream))
    foreign = b"MSG fgpu.a 1 $JS.ACK.FGPU.other.1.1.1.1.0 2\r\n{}\r\n"
    with pytest.raises(LogError, match="not of consumer c"):
        run(foreign, len(foreign))
