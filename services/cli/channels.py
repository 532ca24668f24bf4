"""The user's end of a channel into a session: a terminal (``fgpu session shell``), or a
local TCP port whose each connection is relayed to a port in the container (``fgpu
session app``). Over the bus alone, as the session's owner or an administrator of its
domain asks (the agent checks); see ``services.actors.agent_channels`` for the other end.

The request and the relay are ``services.actors.user_channels``'s (the web UI's terminal
opens its own there too); what is here is the local end: the terminal, the TCP port.
"""

import contextlib
import os
import termios
import tty
from collections.abc import Callable, Iterator

import anyio
from anyio.abc import ByteStream, TaskStatus

from services.actors.relay import Closing
from services.actors.user_channels import ChannelRefused, app, shell
from services.domain.channels import PING_S
from services.ports import AgentRequests, AgentUnreachable

__all__ = ["ChannelRefused", "Terminal", "app_connection", "serve_app", "shell"]

_READ = 64 << 10


class Terminal:
    """A terminal's end: bytes read from ``fd_in``, written to ``fd_out``."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in, self.fd_out = fd_in, fd_out

    async def read(self) -> bytes | None:
        await anyio.wait_readable(self.fd_in)
        try:
            data = os.read(self.fd_in, _READ)
        except OSError:  # a pty whose other side closed
            return None
        return data or None

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            await anyio.wait_writable(self.fd_out)
            view = view[os.write(self.fd_out, view) :]

    def size(self) -> tuple[int, int]:
        """Its rows and columns (24 x 80 if it is no terminal)."""
        try:
            cols, rows = os.get_terminal_size(self.fd_out)
        except OSError:
            return 24, 80
        return rows, cols

    @contextlib.contextmanager
    def raw(self) -> Iterator[None]:
        """Keys go through as typed (Ctrl-C to the shell in the container), for the block;
        nothing changes if the input is no terminal."""
        if not os.isatty(self.fd_in):
            yield
            return
        saved = termios.tcgetattr(self.fd_in)
        tty.setraw(self.fd_in)
        try:
            yield
        finally:
            termios.tcsetattr(self.fd_in, termios.TCSADRAIN, saved)


class _Socket:
    """A TCP connection's end."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream

    async def read(self) -> bytes | None:
        try:
            return await self.stream.receive(_READ)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None

    async def write(self, data: bytes) -> None:
        await self.stream.send(data)


async def app_connection(
    bus: AgentRequests,
    requester: str,
    agent_id: str,
    session_id: str,
    target: str,
    stream: ByteStream,
    *,
    ping_s: float = PING_S,
) -> Closing:
    """One TCP connection (``stream``) relayed to ``target`` in ``session_id``'s container
    (a service the image declares, or a port). Raises ChannelRefused, AgentUnreachable."""
    return await app(bus, requester, agent_id, session_id, target, _Socket(stream), ping_s=ping_s)


async def serve_app(
    bus: AgentRequests,
    requester: str,
    agent_id: str,
    session_id: str,
    target: str,
    port: int,
    *,
    on_error: Callable[[str], None] | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on 127.0.0.1:``port`` (0: any free one; the port is what ``task_status`` is
    given) and relay each connection as ``app_connection`` does; a refused one is closed
    and told to ``on_error`` (a callable of the message), the others go on."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)

    async def handle(stream: ByteStream) -> None:
        async with stream:
            try:
                await app_connection(bus, requester, agent_id, session_id, target, stream)
            except (ChannelRefused, AgentUnreachable) as e:  # that connection's alone
                if on_error is not None:
                    on_error(str(e))

    async with listener:
        task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
        await listener.serve(handle)
