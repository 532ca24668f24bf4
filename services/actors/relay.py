"""Relaying a byte stream over a channel's pipe, with flow control: the same code at both
ends (the agent, between the pipe and a program in the container; the CLI, between the
pipe and a terminal or a local TCP connection). The frames are
``services.domain.channels``'s.

A relay ends when the other side sends End, when its own end's output ends and it is
the side that reports an exit code (the agent), when nothing is heard for ``idle_s``,
when its owner cuts it (``cut``: the agent, once the requester's key is revoked), or
when the pipe or its end fails; it then sends End (unless the other side did) and says
how it closed.
"""

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
from anyio.abc import TaskGroup

from services.domain.channels import (
    CHUNK_BYTES,
    IDLE_S,
    PING_S,
    WINDOW_BYTES,
    Ack,
    Data,
    End,
    Eof,
    Frame,
    Ping,
    Resize,
    decode_frame,
    encode_frame,
)
from services.ports import AgentUnreachable, ContainerError, Pipe

__all__ = ["ByteEnd", "Closing", "relay"]

# What an end or the pipe raises when its other side has gone.
_GONE = (
    OSError,
    ContainerError,
    AgentUnreachable,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


_LAST_WORD_S = 2.0  # the End a closing side sends, at most this long


class ByteEnd(Protocol):
    """The local end of a relay: a program, a terminal, a TCP connection."""

    async def read(self) -> bytes | None:
        """The next bytes; None once there are no more."""
        ...

    async def write(self, data: bytes) -> None: ...


@dataclass
class Closing:
    """How a relay closed: ``received`` bytes came from the pipe into the end, ``sent``
    went from the end to the pipe; the program's ``exit_code`` if one was reported."""

    reason: str = ""
    received: int = 0
    sent: int = 0
    exit_code: int | None = None
    peer_ended: bool = False


class _Window:
    """Bytes sent and not yet acknowledged, and a wait for room."""

    def __init__(self, size: int) -> None:
        self.size, self.unacked = size, 0
        self._room = anyio.Event()

    async def take(self, n: int) -> None:
        while self.unacked > 0 and self.unacked + n > self.size:
            await self._room.wait()
        self.unacked += n

    def give(self, n: int) -> None:
        self.unacked = max(0, self.unacked - n)
        self._room.set()
        self._room = anyio.Event()


class _Relay:
    def __init__(
        self,
        pipe: Pipe,
        end: ByteEnd,
        exit_code: Callable[[], Awaitable[int | None]] | None,
        on_resize: Callable[[int, int], Awaitable[None]] | None,
        window: int,
        ended: str = "the program exited",
    ) -> None:
        self.pipe, self.end, self.ended = pipe, end, ended
        self.exit_code, self.on_resize = exit_code, on_resize
        self.window = _Window(window)
        self.closing = Closing()

    async def send(self, frame: Frame) -> None:
        await self.pipe.send(encode_frame(frame))

    def close(self, tg: TaskGroup, reason: str) -> None:
        if not self.closing.reason:
            self.closing.reason = reason
        tg.cancel_scope.cancel()

    async def outward(self, tg: TaskGroup) -> None:
        """The end's bytes into the pipe, within the window."""
        try:
            while (data := await self.end.read()) is not None:
                for at in range(0, len(data), CHUNK_BYTES):
                    chunk = data[at : at + CHUNK_BYTES]
                    await self.window.take(len(chunk))
                    await self.send(Data(chunk))
                    self.closing.sent += len(chunk)
            if self.exit_code is None:
                await self.send(Eof())  # a local end that is done sending: still hear
                return
            self.closing.exit_code = await self.exit_code()
        except _GONE as e:
            self.close(tg, f"error: {e}")
            return
        self.close(tg, self.ended)

    async def inward(self, tg: TaskGroup, frames: AsyncIterator[bytes], idle_s: float) -> None:
        """The pipe's frames: bytes to the end (acknowledged once handed on), room in the
        window, resizes, the other side's end."""
        try:
            while True:
                with anyio.move_on_after(idle_s):
                    raw = await anext(frames, None)
                    if raw is None:
                        self.close(tg, "the bus closed the channel")
                        return
                    frame = decode_frame(raw)
                    if isinstance(frame, Data):
                        await self.end.write(frame.data)
                        self.closing.received += len(frame.data)
                        await self.send(Ack(len(frame.data)))
                    elif isinstance(frame, Ack):
                        self.window.give(frame.n)
                    elif isinstance(frame, Resize) and self.on_resize is not None:
                        await self.on_resize(frame.rows, frame.cols)
                    elif isinstance(frame, End):
                        self.closing.exit_code = frame.exit_code
                        self.closing.peer_ended = True
                        self.close(tg, frame.reason or "the other side closed")
                        return
                    continue  # heard something: Ping and Eof need nothing more
                self.close(tg, f"nothing heard for {idle_s:g} s")
                return
        except _GONE as e:
            self.close(tg, f"error: {e}")

    async def cut(self, tg: TaskGroup, why: Callable[[], Awaitable[str]]) -> None:
        self.close(tg, await why())

    async def ping(self, every_s: float) -> None:
        while True:
            await anyio.sleep(every_s)
            with contextlib.suppress(AgentUnreachable):
                await self.send(Ping())


async def relay(
    pipe: Pipe,
    end: ByteEnd,
    *,
    exit_code: Callable[[], Awaitable[int | None]] | None = None,
    on_resize: Callable[[int, int], Awaitable[None]] | None = None,
    ping_s: float = PING_S,
    idle_s: float = IDLE_S,
    window: int = WINDOW_BYTES,
    cut: Callable[[], Awaitable[str]] | None = None,
    ended: str = "the program exited",
) -> Closing:
    """Relay between ``pipe`` and ``end`` until the channel closes; how it closed.

    ``exit_code``: this side reports the program's end (the agent): once the end's output
    has ended, End goes to the other side with what it returns. Without it, the end's
    output ending sends Eof and the relay goes on hearing. ``on_resize`` is given the
    other side's Resize frames. ``cut``: once it returns, the relay closes with what it
    returned as the reason. ``ended``: the reason when the end's output ended (with
    ``exit_code``). Raises nothing the pipe or the end raise: they close it.
    """
    r = _Relay(pipe, end, exit_code, on_resize, window, ended)
    frames = aiter(pipe)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(r.outward, tg)
            tg.start_soon(r.inward, tg, frames, idle_s)
            tg.start_soon(r.ping, ping_s)
            if cut is not None:
                tg.start_soon(r.cut, tg, cut)
    finally:
        # Said to the other side however it ends, cancelled too (the user's Ctrl-C of
        # `fgpu session app`): else it would wait out its idle limit.
        if not r.closing.peer_ended:
            reason = r.closing.reason or "closed by the other side's process"
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(_LAST_WORD_S),
                contextlib.suppress(AgentUnreachable),
            ):
                await r.send(End(exit_code=r.closing.exit_code, reason=reason))
    return r.closing
