"""Many authenticated NATS connections of one key, cheaply: each a bare socket that speaks
the protocol's CONNECT with a user and password (through the server's auth callout, as
any client), answers the server's PINGs, and notes when the server closes it.

A thousand nats-py clients would cost the test a thousand reader tasks, flushers and
pingers; a socket here costs one task."""

import json
import resource
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
from anyio.abc import SocketStream, TaskStatus

__all__ = ["Held", "RawRefused", "hold"]

_AT_ONCE = 32  # connects in flight: the callout answers each within the auth timeout


class RawRefused(Exception):
    """The server refused the connection (its ``-ERR``)."""


@dataclass
class Held:
    """The connections of ``hold``: how many the server has closed so far."""

    count: int
    closed: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def _close(self) -> None:
        self.closed += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def all_closed(self) -> None:
        """Back once the server has closed every one."""
        while self.closed < self.count:
            await self._changed.wait()


@asynccontextmanager
async def hold(urls: Sequence[str], user: str, password: str, count: int) -> AsyncIterator[Held]:
    """``count`` connections as ``user``, spread over ``urls`` in turn, each let in (the
    server answered the PING after CONNECT) before the block starts; closed after it.
    Raises RawRefused if one is refused."""
    _room_for(count)
    held = Held(count)
    at_once = anyio.CapacityLimiter(_AT_ONCE)
    async with anyio.create_task_group() as tg:
        # The first alone: the gatekeeper checks the secret once, then knows it.
        await tg.start(_connection, urls[0], user, password, held)
        async with anyio.create_task_group() as connecting:
            for i in range(1, count):
                url = urls[i % len(urls)]
                connecting.start_soon(_started, tg, url, user, password, held, at_once)
        yield held
        tg.cancel_scope.cancel()


def _room_for(sockets: int) -> None:
    """This process's soft limit of open files raised, within the hard one, to hold
    ``sockets`` more than it has room for now (some machines start at 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = sockets + 1024
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(
            resource.RLIMIT_NOFILE,
            (want if hard == resource.RLIM_INFINITY else min(want, hard), hard),
        )


async def _started(
    tg: anyio.abc.TaskGroup,
    url: str,
    user: str,
    password: str,
    held: Held,
    at_once: anyio.CapacityLimiter,
) -> None:
    async with at_once:
        await tg.start(_connection, url, user, password, held)


async def _connection(
    url: str, user: str, password: str, held: Held, *, task_status: TaskStatus[None]
) -> None:
    """One connection: let in, then held until the server closes it."""
    where = urlsplit(url)
    assert where.hostname is not None and where.port is not None
    async with await anyio.connect_tcp(where.hostname, where.port) as stream:
        reader = _Lines(stream)
        info = await reader.line()
        assert info.startswith(b"INFO "), info
        connect = {"user": user, "pass": password, "verbose": False, "pedantic": False}
        connect |= {"protocol": 1, "lang": "raw", "version": "0", "headers": False}
        await stream.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        while (line := await reader.line()) != b"PONG":
            if line.startswith(b"-ERR"):
                raise RawRefused(line.decode(errors="replace"))
        task_status.started()
        try:
            while True:
                if await reader.line() == b"PING":
                    await stream.send(b"PONG\r\n")
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
            held._close()


class _Lines:
    """The protocol's lines off a stream (no message payloads: nothing is subscribed)."""

    def __init__(self, stream: SocketStream) -> None:
        self._stream, self._rest = stream, b""

    async def line(self) -> bytes:
        """The next line, without its CRLF. Raises anyio.EndOfStream once closed."""
        while b"\r\n" not in self._rest:
            self._rest += await self._stream.receive()
        line, self._rest = self._rest.split(b"\r\n", 1)
        return line
