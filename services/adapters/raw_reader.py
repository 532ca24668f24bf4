"""The bulk reader of stored messages: a minimal NATS protocol client for replays.

``read_stored`` pulls from a JetStream consumer made for the read (by the caller, without
acks, under one of its reader names: ``jetstream_readers``) on a socket of its own and
parses the protocol itself, so a message costs a few slices instead of a client object,
a task switch and a decode.

``read_in_child`` runs the same reader in a child process and receives each batch as
one blob, read in a worker thread that lets go of the GIL while it waits and copies:
the replaying process then spends well under a microsecond a message on
reading, where parsing costs it several and holds the GIL that its fold needs (a
rebuild reads and folds at once). Run as ``python -m services.adapters.raw_reader`` with
the Source as JSON on its standard input, the child writes frames to its standard output
(``_frame``).

It speaks plain TCP and authenticates with a user and password or a token. What it does
not speak (TLS asked for by the server, a reply form other than the one below) raises
BulkReadUnavailable, before anything is handed out or after: the caller reads on in order
in order (``EventLog.read``). So does a server that refuses this second connection, or
what it asks, before the read's first message (an ``-ERR``: too many connections, a
permission the read in order does not need): the client's own connection still serves.

Payloads come canonical (``RawBatch``): an event as ``events.encode`` writes it, whatever
its producer wrote, so that a projection store can keep the bytes it is handed instead
of encoding every event again. In a child process that work (a decode and an encode a
message) is done on the core the folding process does not need; a short read in
process does it under the caller's GIL, which then decodes each payload twice.
"""

import asyncio
import contextlib
import json
import os
import re
import struct
import subprocess
import sys
from array import array
from collections.abc import AsyncGenerator, Iterator
from dataclasses import asdict, dataclass
from itertools import accumulate, pairwise
from typing import IO, Any

import anyio
import msgspec

from events import RawBatch, decode, encode
from services.ports import BulkReadUnavailable, LogError

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
    token: str | None = None
    inbox_prefix: str = "_INBOX"  # the connection's own: where it may receive


async def read_stored(src: Source) -> AsyncGenerator[RawBatch, None]:
    """Messages ``src.after + 1`` to ``src.end``, in order, at most ``src.batch`` at a time.

    Raises BulkReadUnavailable if the server requires TLS, replies in a form this reader
    does not parse, or refuses the reader before its first message; LogError if it cannot
    be reached, hangs up, or refuses once messages have come.
    """
    async with contextlib.aclosing(_read(src)) as batches:
        async for seqs, names, payloads in batches:
            canonical = _canonical(payloads)
            offsets = array("q", accumulate(map(len, canonical), initial=0))
            yield RawBatch(
                seqs,
                _subjects(b"\n".join(names), len(seqs)),
                canonical,
                b"".join(canonical),
                offsets.tobytes(),
            )


def _canonical(payloads: list[bytes]) -> list[bytes]:
    """Each payload as ``events.encode`` of the event it decodes to; as it is if none."""
    try:
        return [encode(decode(p)) for p in payloads]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [_canonical_one(p) for p in payloads]


def _canonical_one(payload: bytes) -> bytes:
    try:
        return encode(decode(payload))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return payload


def _reply_seq(reply: bytes, ours: bytes, consumer: str, head: bytes) -> bytes:
    """The stream sequence in ``reply``, the reply subject of a message on this read's
    inbox, when it is ``ours`` (``$JS.ACK.<stream>.<consumer>.``) followed by
    ``<delivered>.<stream seq>.<consumer seq>.<time>.<pending>``.

    Raises BulkReadUnavailable if the reply is the consumer's in another form (the v2
    acks lead with a domain and an account hash): never misread. Raises LogError if it is
    not the consumer's: taken, its sequence could end the read early or repeat one.
    """
    if reply.startswith(ours):
        fields = reply[len(ours) :].split(b".")
        if len(fields) == 5 and all(f.isdigit() for f in fields):
            return fields[1]
    tokens = reply.split(b".")
    if tokens[:2] == [b"$JS", b"ACK"] and consumer.encode() in tokens:
        raise BulkReadUnavailable(
            f"raw read: consumer {consumer} replies in a form the bulk reader does not parse: "
            f"{reply[:200].decode(errors='replace')}"
        )
    raise LogError(
        f"raw read: a message not of consumer {consumer}: {head[:200].decode(errors='replace')}"
    )


def _refusal(line: bytes, got: int) -> LogError:
    """The error for the server's ``-ERR`` ``line``, met after ``got`` of the read's messages.

    Before the first, the server refuses this connection or what it asks (its user, the
    number of connections, a publish to the consumer's API or a subscription to the inbox)
    where the client's own connection was let through: BulkReadUnavailable, so that the
    caller reads in order rather than retrying what will be refused again. After some, the
    reader was let through and something else went wrong: LogError.
    """
    text = line.decode(errors="replace")
    if got == 0:
        return BulkReadUnavailable(f"NATS refused the bulk reader: {text}")
    return LogError(f"NATS refused a raw read: {text}")


async def _handshake(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: dict[str, Any]
) -> None:
    """Send CONNECT and wait for the server's PONG: it has taken the connection.

    Nothing else is sent before the answer, so that a server that refuses the connection
    and hangs up has read all of it: its ``-ERR`` then arrives before an orderly close, not
    lost to a reset. Raises BulkReadUnavailable on an ``-ERR`` (``_refusal``), LogError if
    the server hangs up without one or says something no server says here.
    """
    writer.write(b"CONNECT %s\r\nPING\r\n" % json.dumps(hello).encode())
    while True:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise LogError("the server closed the connection before a raw read began")
        if line.startswith(b"PONG"):
            return
        if line.startswith(b"-ERR"):
            raise _refusal(line.rstrip(), got=0)
        if line.startswith(b"PING"):
            writer.write(b"PONG\r\n")
        elif not line.startswith((b"INFO ", b"+OK")):
            raise LogError(f"raw read: unexpected answer from the server: {line[:200]!r}")


def _subjects(names: bytes, count: int) -> list[str]:
    """``count`` subjects joined by newlines, split. Raises LogError if one is not UTF-8
    or holds a newline."""
    try:
        subjects = names.decode().split("\n")
    except UnicodeDecodeError as e:
        raise LogError(f"raw read: unexpected answer from the server: {e!r}") from e
    if len(subjects) != count:
        raise LogError("raw read: unexpected answer from the server: a subject with a newline")
    return subjects


class Protocol:
    """The pure part of a raw read: the server's bytes in, the messages of the read and
    what to send the server out; no socket. ``_read`` is its I/O loop.

    It keeps two pulls in flight, sized by the payloads seen so far: they bound what the
    server has sent and this reader not yet read (a reader with more than the server
    allows buffered for it, 64 MB by default, is cut off as a slow consumer, as pulls of
    100,000 events were). Before any message it assumes the largest payload the server
    takes (``largest``): the first pulls are small, the next ones sized by what came.
    """

    def __init__(self, src: Source, largest: int = 1 << 20) -> None:
        self.src = src
        self.largest = largest
        self.inbox = f"{src.inbox_prefix}.{src.consumer}".encode()
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{src.stream}.{src.consumer}".encode()
        # The usual line, the header of a message with a reply from this read's consumer,
        # is read by one match instead of a split. Groups: H, subject, stream sequence (as
        # _reply_seq takes it), header bytes (HMSG only), bytes. Its fields hold no
        # whitespace, so the line ends at the first CRLF and splits into these fields:
        # both paths read it alike. Any other line (a PING, an error, a status, a line not
        # yet whole, a reply of another form) takes the general path.
        self._ours = f"$JS.ACK.{src.stream}.{src.consumer}.".encode()
        self._message = re.compile(
            rb"(H)?MSG (\S+) \S+ "
            + re.escape(self._ours)
            + rb"\d+\.(\d+)\.\d+\.\d+\.\d+ (?(1)(\d+) )(\d+)\r\n"
        ).match
        self.seq = src.after  # the last message's stream sequence
        self.got = 0  # messages of the read received
        self._got_bytes = 0
        self._pending = 0  # messages asked for and not yet received
        self._first = 0  # the size of the last pull
        self._buf = b""
        self._seqs: list[int] = []
        self._subjects: list[bytes] = []
        self._payloads: list[bytes] = []

    @property
    def done(self) -> bool:
        return self.seq >= self.src.end

    def start(self) -> bytes:
        """What to send once the server took the connection: the subscription to the
        read's inbox and two pulls, so that the server never waits for us."""
        self._first = self._pull_size()
        self._pending = 2 * self._first
        return b"SUB %s 1\r\n%s" % (self.inbox, self._pull(self._first) * 2)

    def _pull(self, n: int) -> bytes:
        request = json.dumps({"batch": n, "expires": 30_000_000_000}).encode()
        return b"PUB %s %s %d\r\n%s\r\n" % (self._next, self.inbox, len(request), request)

    def _pull_size(self) -> int:
        average = (self._got_bytes // self.got) if self.got else self.largest
        return max(1, min(self.src.batch, _PULL, _IN_FLIGHT // 2 // max(average, 1)))

    def feed(self, data: bytes) -> bytes:
        """Take ``data``, the next bytes from the server; what to send it back (PONGs,
        pulls). Raises LogError (BulkReadUnavailable) on a refusal, a reply of another
        form or a line that is not the protocol; IndexError, ValueError on a line this
        parser cannot split (``_read`` says them as LogError)."""
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        # Locals in the loop: it runs once a message, the reader's hot path.
        pos, size, end, message = 0, len(buf), self.src.end, self._message
        seqs, subjects, payloads = self._seqs.append, self._subjects.append, self._payloads.append
        seq, pending, got, got_bytes = self.seq, self._pending, self.got, self._got_bytes
        while seq < end:
            m = message(buf, pos)
            if m is not None:  # the usual line, whole: read without a split
                _, name, stream_seq, skip, total = m.groups()
                start = m.end()
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                head = buf[pos:eol]
                if head[:1] not in (b"H", b"M"):
                    pos = eol + 2
                    self.got = got  # a refusal says whether messages came
                    self._control(head, out)
                    continue  # not a message: pending is unchanged, no pull is due
                name, stream_seq, skip, total = self._general(head)
                start = eol + 2
            length = int(total)
            stop = start + length
            if stop + 2 > size:
                break
            pos = stop + 2
            if stream_seq is None:  # a status: the pull expired or ended short; ask afresh
                pending = 0
            else:
                seq = int(stream_seq)
                seqs(seq)
                subjects(name)
                payloads(buf[start + int(skip) : stop] if skip else buf[start:stop])
                pending -= 1
                got += 1
                got_bytes += length
            if pending <= self._first and seq < end:
                self.got, self._got_bytes = got, got_bytes  # the pull is sized by them
                self._first = self._pull_size()
                out.append(self._pull(self._first))
                pending += self._first
        self.seq, self._pending, self.got, self._got_bytes = seq, pending, got, got_bytes
        self._buf = buf[pos:]
        return b"".join(out)

    def _control(self, head: bytes, out: list[bytes]) -> None:
        """A line that is no message: a PING is answered, an ``-ERR`` raised."""
        if head == b"PING":
            out.append(b"PONG\r\n")
        elif head[:4] == b"-ERR":
            raise _refusal(head, self.got)

    def _general(self, head: bytes) -> tuple[bytes, bytes | None, bytes | None, bytes]:
        """A message's line split: its subject, stream sequence (None: a status), header
        bytes (None: no header) and bytes.

        MSG subject sid reply bytes; HMSG subject sid reply header-bytes bytes; a status
        has no reply: HMSG subject sid header-bytes bytes."""
        parts = head.split(b" ")
        if head[:1] == b"M" or len(parts) == 6:
            seq = _reply_seq(parts[3], self._ours, self.src.consumer, head)
            return parts[1], seq, None if head[:1] == b"M" else parts[4], parts[-1]
        return b"", None, None, parts[-1]

    def batches(self) -> Iterator[tuple[list[int], list[bytes], list[bytes]]]:
        """The batches whole so far (``src.batch`` messages, or the last): sequences,
        subjects, payloads. A message stored after the read began is dropped."""
        seqs, subjects, payloads = self._seqs, self._subjects, self._payloads
        end, batch = self.src.end, self.src.batch
        while seqs and seqs[-1] > end:
            del seqs[-1], subjects[-1], payloads[-1]
        while len(seqs) >= batch or (seqs and self.seq >= end):
            yield seqs[:batch], subjects[:batch], payloads[:batch]
            del seqs[:batch], subjects[:batch], payloads[:batch]


def _hello(src: Source) -> dict[str, Any]:
    """The CONNECT of a raw read, with the source's credentials."""
    hello: dict[str, Any] = {"verbose": False, "pedantic": False, "headers": True}
    hello.update(name="fgpu-raw-reader", lang="python", version="0", protocol=1)
    if src.user:
        hello.update(user=src.user, **{"pass": src.password or ""})
    elif src.token:
        hello.update(auth_token=src.token)
    return hello


async def _read(src: Source) -> AsyncGenerator[tuple[list[int], list[bytes], list[bytes]], None]:
    """``read_stored(src)`` with the subjects undecoded, as the child sends them."""
    if src.end <= src.after:
        return
    try:
        reader, writer = await asyncio.open_connection(src.host, src.port, limit=1 << 22)
    except OSError as e:
        raise LogError(f"cannot reach NATS at {src.host}:{src.port}: {e}") from e
    try:
        info = json.loads((await reader.readline()).split(b" ", 1)[1])
        if info.get("tls_required"):
            raise BulkReadUnavailable("the server requires TLS, which the bulk reader lacks")
        protocol = Protocol(src, int(info.get("max_payload", 1 << 20)))
        await _handshake(reader, writer, _hello(src))
        writer.write(protocol.start())
        await writer.drain()
        while not protocol.done:
            data = await reader.read(1 << 20)
            if not data:
                raise LogError("the server closed the connection during a raw read")
            answer = protocol.feed(data)
            if answer:
                writer.write(answer)
            for batch in protocol.batches():
                yield batch
    except OSError as e:
        raise LogError(f"raw read failed: {e}") from e
    except (IndexError, ValueError) as e:  # a line that is not the protocol we speak
        raise LogError(f"raw read: unexpected answer from the server: {e!r}") from e
    finally:
        writer.close()


# A frame: a head (kind: b"B" batch, b"E" error, b"U" the reader cannot serve this
# server, b"Z" the end; a message count; the size of the rest), then the rest. An error's
# rest (E or U) is its message. A batch's rest: the
# sequences (int64), then count + 1 offsets (int64) in the rest, then the subjects joined
# by newlines (a subject holds no whitespace) up to the first offset, then the canonical
# payloads end to end, payload i from offset i to offset i + 1: the rest is the batch's
# ``body`` as it is. Native byte order: both ends of the pipe run on one machine.
_HEAD = struct.Struct("=cQQ")


def _frame(seqs: list[int], subjects: list[bytes], payloads: list[bytes]) -> list[bytes]:
    """A batch's frame, in pieces to write one after the other."""
    names = b"\n".join(subjects)
    offsets = array("q", accumulate(map(len, payloads), initial=16 * len(seqs) + 8 + len(names)))
    body = b"".join(payloads)
    head = _HEAD.pack(b"B", len(seqs), offsets[-1])
    return [head, array("q", seqs).tobytes(), offsets.tobytes(), names, body]


def _unframe(count: int, rest: bytes) -> RawBatch:
    """The batch of ``count`` messages in a frame's rest. Raises LogError if the rest does
    not hold them as ``_frame`` lays them out, or as _subjects."""
    fixed = 8 * count
    if len(rest) < 2 * fixed + 8:
        raise LogError("the raw reader's process wrote a batch shorter than its count")
    with memoryview(rest) as view:
        seqs = view[:fixed].cast("q").tolist()
        offsets = view[fixed : 2 * fixed + 8].cast("q").tolist()
    # The payloads are sliced, and handed to Arrow as they are (``RawBatch.body``): their
    # offsets must lie in order within the rest, after the subjects.
    if offsets[0] < 2 * fixed + 8 or offsets[-1] != len(rest) or offsets != sorted(offsets):
        raise LogError("the raw reader's process wrote a batch with offsets out of place")
    names = _subjects(rest[2 * fixed + 8 : offsets[0]], count)
    payloads = [rest[a:b] for a, b in pairwise(offsets)]
    return RawBatch(seqs, names, payloads, rest, rest[fixed : 2 * fixed + 8])


def _receive(frames: IO[bytes]) -> RawBatch | None:
    """The next batch the child wrote, or None after its last. Raises the
    BulkReadUnavailable or LogError it reported, or LogError if it wrote something other
    than frames or ended without its last frame.

    Blocking: run in a worker thread, where the reads into the batch's bytes (the bulk of
    the work) let go of the GIL.
    """
    head = frames.read(_HEAD.size)
    if len(head) == _HEAD.size:
        kind, count, size = _HEAD.unpack(head)
        if kind == b"Z":
            return None
        if kind not in (b"B", b"E", b"U"):
            raise LogError(f"the raw reader's process wrote a frame of kind {kind!r}")
        try:
            rest = frames.read(size)  # one bytes object, read into in place: no more copies
        except (MemoryError, OverflowError) as e:  # a size no child of ours writes
            raise LogError(f"the raw reader's process wrote a frame of {size} bytes") from e
        if len(rest) == size:
            if kind == b"U":
                raise BulkReadUnavailable(rest.decode(errors="replace"))
            if kind == b"E":
                raise LogError(rest.decode(errors="replace"))
            return _unframe(count, rest)
    raise LogError("the raw reader's process ended before its last frame")


def _reap(child: subprocess.Popen[bytes], frames: IO[bytes]) -> int:
    """The child's exit status, once it has exited (killed after 10 s), its pipe closed."""
    try:
        return child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()
    finally:
        frames.close()  # after a read abandoned in a worker thread, which the exit ended


async def read_in_child(src: Source) -> AsyncGenerator[RawBatch, None]:
    """``read_stored(src)``, run in a child process. Raises as it does."""
    if src.end <= src.after:
        return
    command = [sys.executable, "-m", "services.adapters.raw_reader"]

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    # Shielded: a cancellation then comes inside the try below, which reaps the child.
    with anyio.CancelScope(shield=True):
        child = await anyio.to_thread.run_sync(spawn)
    assert child.stdin is not None and child.stdout is not None
    frames = child.stdout
    ended = False
    try:
        # The source (a password, maybe) goes on the child's standard input, not its
        # command line, which every local user can read; far less than a pipe holds, it
        # is written without blocking. A child gone already says so by its missing frames.
        with contextlib.suppress(BrokenPipeError), child.stdin:
            child.stdin.write(json.dumps(asdict(src)).encode())
        while True:
            # Abandoned on cancellation: the child is killed below, which ends the read.
            batch = await anyio.to_thread.run_sync(_receive, frames, abandon_on_cancel=True)
            if batch is None:
                ended = True
                break
            yield batch
    finally:
        if not ended:
            child.kill()  # stopped early: by an error, a cancellation or the caller
        with anyio.CancelScope(shield=True):
            status = await anyio.to_thread.run_sync(_reap, child, frames)
    if status != 0:
        raise LogError(f"the raw reader's process failed (exit status {status})")


def _child() -> None:
    src = Source(**json.loads(sys.stdin.buffer.read()))
    # Frames go to a copy of standard output, and anything else that writes there (a
    # library's print) to standard error: a stray byte would corrupt the frames.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)

    def frame(kind: bytes, message: bytes) -> None:
        out.write(_HEAD.pack(kind, 0, len(message)) + message)
        out.flush()

    async def run() -> None:
        async for seqs, subjects, payloads in _read(src):
            # Blocking writes: the parent reading them is all the back-pressure needed.
            out.writelines(_frame(seqs, subjects, _canonical(payloads)))
            out.flush()

    try:
        asyncio.run(run())
    except BulkReadUnavailable as e:
        frame(b"U", str(e).encode())
    except LogError as e:
        frame(b"E", str(e).encode())
    except Exception as e:  # a bug: say what it was rather than just stop
        frame(b"E", f"the raw reader failed: {e!r}".encode())
        raise
    else:
        frame(b"Z", b"")


if __name__ == "__main__":
    _child()
