"""The bulk reader of stored messages: a minimal NATS protocol client for replays.

``read_stored`` pulls from an ephemeral JetStream consumer (made by the caller, without
acks) on a socket of its own and parses the protocol itself, so a message costs a few
slices instead of a client object, a task switch and a decode.

``read_in_child`` runs the same reader in a child process and receives its batches as a
few large blobs: the replaying process then spends well under a microsecond a message
on reading, where parsing costs it several and holds the GIL that its fold needs (a
rebuild reads and folds at once). Run as ``python -m services.adapters.raw_reader`` with
the Source as JSON on its standard input, the child writes frames to its standard output
(``_encode``).
"""

import asyncio
import json
import os
import struct
import sys
from array import array
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from services.ports import LogError, RawBatch

__all__ = ["Source", "read_in_child", "read_stored"]

_PULL = 10_000  # messages asked for at once, at most (see read_stored)
_IN_FLIGHT = 16 << 20  # bytes sent by the server and not yet read, about


@dataclass(frozen=True)
class Source:
    """Where to read: a server, and a consumer of the stream made for this read."""

    host: str
    port: int
    stream: str
    consumer: str
    after: int  # the consumer starts at after + 1
    end: int  # read up to this sequence
    batch: int
    user: str | None = None
    password: str | None = None


async def read_stored(src: Source) -> AsyncGenerator[RawBatch, None]:
    """Messages ``src.after + 1`` to ``src.end``, in order, at most ``src.batch`` at a time.

    Raises LogError if the server cannot be reached, refuses, or hangs up.
    """
    if src.end <= src.after:
        return
    inbox = f"_INBOX.{src.consumer}".encode()
    subject = f"$JS.API.CONSUMER.MSG.NEXT.{src.stream}.{src.consumer}".encode()

    def pull(n: int) -> bytes:
        request = json.dumps({"batch": n, "expires": 30_000_000_000}).encode()
        return b"PUB %s %s %d\r\n%s\r\n" % (subject, inbox, len(request), request)

    def pull_size() -> int:
        # Two pulls in flight, sized by the payloads seen so far, bound what the server
        # has sent and this reader not yet read: a reader with more than the server
        # allows buffered for it (64 MB by default) is cut off as a slow consumer, as
        # pulls of 100,000 events were.
        # Before any message, assume the largest the server takes: the first pulls are
        # small, and the next ones sized by what came.
        average = (got_bytes // got) if got else largest
        return max(1, min(src.batch, _PULL, _IN_FLIGHT // 2 // max(average, 1)))

    got = got_bytes = 0
    largest = 1 << 20
    batch, end = src.batch, src.end
    try:
        reader, writer = await asyncio.open_connection(src.host, src.port, limit=1 << 22)
    except OSError as e:
        raise LogError(f"cannot reach NATS at {src.host}:{src.port}: {e}") from e
    try:
        info = json.loads((await reader.readline()).split(b" ", 1)[1])
        largest = int(info.get("max_payload", largest))
        if info.get("tls_required"):
            raise LogError("raw reads do not speak TLS")
        hello: dict[str, Any] = {"verbose": False, "pedantic": False, "headers": True}
        hello.update(name="fgpu-raw-reader", lang="python", version="0", protocol=1)
        if src.user:
            hello.update(user=src.user, **{"pass": src.password or ""})
        writer.write(b"CONNECT %s\r\nSUB %s 1\r\n" % (json.dumps(hello).encode(), inbox))
        first = pull_size()
        writer.write(pull(first) * 2)  # two pulls in flight: the server never waits for us
        await writer.drain()
        pending = 2 * first  # messages asked for and not yet received
        seqs: list[int] = []
        subjects: list[str] = []
        payloads: list[bytes] = []
        buf = b""
        seq = src.after
        while seq < end:
            data = await reader.read(1 << 20)
            if not data:
                raise LogError("the server closed the connection during a raw read")
            buf = buf + data if buf else data
            pos = 0
            size = len(buf)
            while seq < end:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                head = buf[pos:eol]
                kind = head[:1]
                if kind in (b"H", b"M"):
                    # MSG subject sid reply bytes; HMSG subject sid reply header-bytes bytes
                    parts = head.split(b" ")
                    total = int(parts[-1])
                    if eol + 4 + total > size:
                        break
                    start = eol + 2
                    pos = start + total + 2
                    if kind == b"M" or len(parts) == 6:
                        skip = 0 if kind == b"M" else int(parts[4])  # the headers
                        seq = int(parts[3].rsplit(b".", 4)[1])
                        seqs.append(seq)
                        subjects.append(parts[1].decode())
                        payloads.append(buf[start + skip : start + total])
                        pending -= 1
                        got += 1
                        got_bytes += total
                    else:  # a status, no reply: the pull expired or ended short; ask afresh
                        pending = 0
                else:
                    pos = eol + 2
                    if head == b"PING":
                        writer.write(b"PONG\r\n")
                    elif head[:4] == b"-ERR":
                        raise LogError(f"NATS refused a raw read: {head.decode()}")
                if pending <= first and seq < end:
                    first = pull_size()
                    writer.write(pull(first))
                    pending += first
            buf = buf[pos:]
            while seqs and seqs[-1] > end:  # stored after the read began
                del seqs[-1], subjects[-1], payloads[-1]
            while len(seqs) >= batch or (seqs and seq >= end):
                yield seqs[:batch], subjects[:batch], payloads[:batch]
                del seqs[:batch], subjects[:batch], payloads[:batch]
    except OSError as e:
        raise LogError(f"raw read failed: {e}") from e
    except (IndexError, ValueError) as e:  # a line that is not the protocol we speak
        raise LogError(f"raw read: unexpected answer from the server: {e!r}") from e
    finally:
        writer.close()


# A frame: kind (b"B" batch, b"E" error, b"Z" the end), message count, then two lengths in
# bytes. A batch's body: the sequences (int64), the payloads' end offsets (uint64), the
# subjects joined by newlines (a subject holds no whitespace), the payloads end to end.
# Native byte order: both ends of the pipe run on one machine.
_HEAD = struct.Struct("=cQQQ")


def _encode(seqs: list[int], subjects: list[str], payloads: list[bytes]) -> list[bytes]:
    ends = array("Q")
    offset = 0
    for p in payloads:
        offset += len(p)
        ends.append(offset)
    names = "\n".join(subjects).encode()
    body = b"".join(payloads)
    head = _HEAD.pack(b"B", len(seqs), len(names), len(body))
    return [head, array("q", seqs).tobytes(), ends.tobytes(), names, body]


def _decode(count: int, fixed: bytes, names: bytes, body: bytes) -> RawBatch:
    seqs = array("q")
    seqs.frombytes(fixed[: 8 * count])
    ends = array("Q")
    ends.frombytes(fixed[8 * count :])
    starts = [0, *ends[:-1]]
    return (
        seqs.tolist(),
        names.decode().split("\n"),
        [body[a:b] for a, b in zip(starts, ends, strict=True)],
    )


async def read_in_child(src: Source) -> AsyncGenerator[RawBatch, None]:
    """``read_stored(src)``, run in a child process. Raises LogError as it does."""
    if src.end <= src.after:
        return
    # The source (a password, maybe) goes on the child's standard input, not its command
    # line, which every local user can read.
    command = [sys.executable, "-m", "services.adapters.raw_reader"]
    async with await anyio.open_process(command, stderr=None) as child:
        assert child.stdin is not None and child.stdout is not None
        await child.stdin.send(json.dumps(asdict(src)).encode())
        await child.stdin.aclose()
        frames = BufferedByteReceiveStream(child.stdout)
        ended = False
        try:
            while True:
                kind, count, names_len, body_len = _HEAD.unpack(
                    await frames.receive_exactly(_HEAD.size)
                )
                if kind == b"Z":
                    ended = True
                    break
                if kind == b"E":
                    raise LogError((await frames.receive_exactly(names_len)).decode())
                if kind != b"B":
                    raise LogError(f"the raw reader's process wrote a frame of kind {kind!r}")
                fixed = await frames.receive_exactly(16 * count)
                names = await frames.receive_exactly(names_len)
                body = await frames.receive_exactly(body_len) if body_len else b""
                yield _decode(count, fixed, names, body)
        except anyio.IncompleteRead as e:
            raise LogError("the raw reader's process ended before its last frame") from e
        finally:
            if not ended and child.returncode is None:
                child.kill()  # stopped early: by an error, a cancellation or the caller
        with anyio.fail_after(10):
            status = await child.wait()
    if status != 0:
        raise LogError(f"the raw reader's process failed (exit status {status})")


def _child() -> None:
    src = Source(**json.loads(sys.stdin.buffer.read()))
    # Frames go to a copy of standard output, and anything else that writes there (a
    # library's print) to standard error: a stray byte would corrupt the frames.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)

    def frame(kind: bytes, message: bytes) -> None:
        out.write(_HEAD.pack(kind, 0, len(message), 0) + message)
        out.flush()

    async def run() -> None:
        async for seqs, subjects, payloads in read_stored(src):
            # Blocking writes: the parent reading them is all the back-pressure needed.
            out.writelines(_encode(seqs, subjects, payloads))
            out.flush()

    try:
        asyncio.run(run())
    except LogError as e:
        frame(b"E", str(e).encode())
    except Exception as e:  # a bug: say what it was rather than just stop
        frame(b"E", f"the raw reader failed: {e!r}".encode())
        raise
    else:
        frame(b"Z", b"")


if __name__ == "__main__":
    _child()
