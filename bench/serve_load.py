"""The serving bench's load generator: a lean HTTP/1.1 client over asyncio's protocols.

One request, encoded once, sent again and again on keep-alive connections; each answer
read by its ``Content-Length`` (every server measured sends one) and its status checked.
aiohttp's client costs several times more CPU a request, and on a 2-core host the
generator's CPU comes out of the paths it compares; this one leaves them more room.

``trivial_server`` answers every request with the same bytes without parsing it: the
generator against it (``ceiling``, in its own process) is the most this generator can
ask for on this host, reported beside the figures so that a path near it says "the
generator is the bottleneck" rather than anything about the path.

Run as ``python -m bench.serve_load PORT``: a trivial server on 127.0.0.1:PORT.
"""

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from services.adapters.nats_server import free_port

__all__ = ["Segment", "Target", "ceiling", "closed_loop", "fixed_rate", "trivial_server"]

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
_LENGTH = b"\r\ncontent-length:"


@dataclass(frozen=True)
class Target:
    """Where a way's requests go, and the one request it sends."""

    host: str
    port: int
    request: bytes

    @classmethod
    def get(cls, host: str, port: int, path: str, headers: dict[str, str]) -> "Target":
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return cls(host, port, ("\r\n".join(lines) + "\r\n\r\n").encode())


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._waiter: asyncio.Future[int] | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport  # asyncio sets TCP_NODELAY on TCP sockets

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0 or self._waiter is None:
            return
        head = bytes(self._buffer[:end]).lower()
        at = head.find(_LENGTH)
        if at < 0:
            self._fail(ConnectionError(f"an answer without Content-Length: {head[:80]!r}"))
            return
        stop = head.find(b"\r\n", at + 2)
        length = int(head[at + len(_LENGTH) : stop if stop >= 0 else len(head)])
        if len(self._buffer) < end + 4 + length:
            return
        del self._buffer[: end + 4 + length]
        self._waiter.set_result(int(head[9:12]))
        self._waiter = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("the server closed a keep-alive connection"))

    def _fail(self, error: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        self._waiter = None

    async def get(self, request: bytes) -> None:
        """Send ``request`` and wait for its whole answer. Raises ConnectionError for a
        closed connection or an answer other than 200."""
        assert self._transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        status = await self._waiter
        if status != 200:
            raise ConnectionError(f"status {status}")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def _connect(target: Target) -> _Connection:
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(_Connection, target.host, target.port)
    return connection


async def closed_loop(target: Target, concurrency: int, seconds: float) -> float:
    """Requests per second with ``concurrency`` connections, each sending its next
    request as soon as its last is answered, for ``seconds``."""
    connections = [await _connect(target) for _ in range(concurrency)]
    done = 0

    async def worker(c: _Connection, stop: float) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await c.get(target.request)
            done += 1

    try:
        started = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for c in connections:
                tg.create_task(worker(c, started + seconds))
        return done / (time.perf_counter() - started)
    finally:
        for c in connections:
            c.close()


@dataclass
class Segment:
    """One way's requests at a fixed rate: each one's latency from when it was due, and
    how late the generator sent it (both in ms)."""

    latency_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)


async def fixed_rate(target: Target, rate: float, seconds: float) -> Segment:
    """``rate`` requests a second for ``seconds``, open loop: a request is sent when it is
    due whether or not the last was answered (on an idle connection, a new one if none
    is), and timed from when it was due, so a stall of the path counts in full."""
    segment = Segment()
    idle = [await _connect(target) for _ in range(4)]
    opened = list(idle)

    async def one(due: float) -> None:
        if not idle:
            opened.append(await _connect(target))
            idle.append(opened[-1])
        c = idle.pop()
        segment.late_ms.append((time.perf_counter() - due) * 1000)
        await c.get(target.request)
        segment.latency_ms.append((time.perf_counter() - due) * 1000)
        idle.append(c)

    try:
        async with asyncio.TaskGroup() as tg:
            start = time.perf_counter() + 0.01
            for i in range(int(rate * seconds)):
                due = start + i / rate
                # asyncio's timers wake up to 1 ms late (epoll's timeout is in ms): both
                # ways pay it alike, and late_ms says it; a busy wait would take a core
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                tg.create_task(one(due))
        return segment
    finally:
        for c in opened:
            c.close()


def trivial_server(port: int) -> None:
    """Answer every request on 127.0.0.1:``port`` with ``_ANSWER``, parsing nothing but
    the end of each head (the generator sends no body)."""

    class Answer(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport
            self.pending = b""

        def data_received(self, data: bytes) -> None:
            data = self.pending + data
            n = data.count(b"\r\n\r\n")
            self.pending = data[data.rfind(b"\r\n\r\n") + 4 :] if n else data
            if n:
                self.transport.write(_ANSWER * n)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


@contextmanager
def _trivial(port: int) -> Iterator[None]:
    command = [sys.executable, "-m", "bench.serve_load", str(port)]
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
    try:
        yield
    finally:
        process.terminate()
        process.wait(10)


async def ceiling(concurrency: int, seconds: float) -> float:
    """This generator's closed loop against ``trivial_server`` in its own process:
    requests per second, the most it can ask for here."""
    port = free_port()
    with _trivial(port):
        target = Target.get("127.0.0.1", port, "/", {})
        for _ in range(500):  # until it listens: a process we start, bounded
            try:
                (await _connect(target)).close()
                break
            except OSError:
                await asyncio.sleep(0.01)
        return await closed_loop(target, concurrency, seconds)


if __name__ == "__main__":
    trivial_server(int(sys.argv[1]))
