"""The user's end of a channel into a session, over the bus alone: the request asked of
the session's agent on a channel heard first, then relayed. The CLI's ``fgpu session
shell``, ``fgpu session app`` and ``fgpu session logs --follow`` (``services.cli``, over a
local terminal, TCP port or stdout), the web UI's terminal and followed output (over a
WebSocket or server-sent events) and its app proxy (over an HTTP request or a WebSocket;
all ``services.wiring.acting``) open theirs here, as the same requests from the same
user; the agent's end is ``services.actors.agent_channels``.

The channel's down subject is heard before the request goes, so nothing the agent sends
first (a shell's prompt) is missed.
"""

import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Protocol

import anyio

from events import subjects as subj
from services.actors.relay import ByteEnd, Closing, relay
from services.domain.channels import PING_S, Resize, encode_frame
from services.ports import (
    AgentReply,
    AgentRequest,
    AgentRequests,
    AppRequest,
    ChannelReply,
    FollowRequest,
    Pipe,
    ShellRequest,
)

__all__ = [
    "ChannelRefused",
    "OutputEnd",
    "TerminalEnd",
    "app",
    "follow",
    "new_channel",
    "opened",
    "shell",
]


class ChannelRefused(Exception):
    """The agent did not open the channel; the message says why."""


class TerminalEnd(ByteEnd, Protocol):
    """A terminal's end: its bytes, and its size when the shell opens."""

    def size(self) -> tuple[int, int]:
        """Its rows and columns."""
        ...


class OutputEnd(Protocol):
    """Where a followed output goes: a terminal's stdout, a page's stream of events. The
    relay acknowledges what ``write`` has returned from, so a slow end slows the agent's
    reading of the container's output (it reads no more than a window ahead)."""

    async def write(self, data: bytes) -> None: ...


def new_channel() -> str:
    """A fresh channel name (a subject token no one can guess)."""
    return "c" + secrets.token_hex(8)


@contextlib.asynccontextmanager
async def opened(
    bus: AgentRequests, requester: str, agent_id: str, request: AgentRequest
) -> AsyncIterator[tuple[Pipe, ChannelReply]]:
    """The channel ``request`` names, heard, then asked for; its pipe and the answer.
    Raises ChannelRefused, or AgentUnreachable."""
    channel: str = getattr(request, "channel")  # noqa: B009 - both requests name one
    up, down = subj.channel(agent_id, requester, channel)
    async with bus.pipe(listen=down, speak=up) as pipe:
        reply: AgentReply = await bus.ask(agent_id, request)
        if not isinstance(reply, ChannelReply):
            raise ChannelRefused(f"agent {agent_id}: {getattr(reply, 'error', reply)}")
        if not reply.ok:
            raise ChannelRefused(str(reply.error))
        yield pipe, reply


async def shell(
    bus: AgentRequests,
    requester: str,
    agent_id: str,
    session_id: str,
    terminal: TerminalEnd,
    sizes: AsyncIterator[tuple[int, int]],
    *,
    term: str = "xterm",
    ping_s: float = PING_S,
) -> Closing:
    """A terminal in ``session_id`` on ``terminal`` until the shell exits; each size from
    ``sizes`` goes to the container's terminal. Raises ChannelRefused, AgentUnreachable."""
    rows, cols = terminal.size()
    request = ShellRequest(
        session_id=session_id, channel=new_channel(), rows=rows, cols=cols, term=term
    )
    opening = opened(bus, requester, agent_id, request)
    async with opening as (pipe, _), anyio.create_task_group() as tg:
        tg.start_soon(_send_sizes, pipe, sizes)
        closing = await relay(pipe, terminal, ping_s=ping_s)
        tg.cancel_scope.cancel()
    return closing


async def app(
    bus: AgentRequests,
    requester: str,
    agent_id: str,
    session_id: str,
    target: str,
    end: ByteEnd,
    *,
    ping_s: float = PING_S,
) -> Closing:
    """One connection (``end``) relayed to ``target`` in ``session_id``'s container (a
    service the image declares, or a port) until either side closes. Raises
    ChannelRefused, AgentUnreachable."""
    request = AppRequest(session_id=session_id, channel=new_channel(), target=target)
    async with opened(bus, requester, agent_id, request) as (pipe, _):
        return await relay(pipe, end, ping_s=ping_s)


async def _send_sizes(pipe: Pipe, sizes: AsyncIterator[tuple[int, int]]) -> None:
    async for rows, cols in sizes:
        await pipe.send(encode_frame(Resize(rows, cols)))


async def follow(
    bus: AgentRequests,
    requester: str,
    agent_id: str,
    session_id: str,
    out: OutputEnd,
    *,
    tail: int = 200,
    ping_s: float = PING_S,
) -> Closing:
    """``session_id``'s output on ``out``: its last ``tail`` lines, then as it is written,
    until its container ends (``Closing.peer_ended``), the agent cuts it, or the caller is
    cancelled (the agent is told, and stops). Raises ChannelRefused, AgentUnreachable."""
    request = FollowRequest(session_id=session_id, channel=new_channel(), tail=tail)
    async with opened(bus, requester, agent_id, request) as (pipe, _):
        return await relay(pipe, _Listening(out), ping_s=ping_s)


class _Listening:
    """An end that only hears: it has nothing to send (Eof at once)."""

    def __init__(self, out: OutputEnd) -> None:
        self._out = out

    async def read(self) -> bytes | None:
        return None

    async def write(self, data: bytes) -> None:
        await self._out.write(data)
