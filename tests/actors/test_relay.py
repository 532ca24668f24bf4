"""The relay at both ends of a channel (``services.actors.relay``), on the in-memory bus:
bytes both ways, the program's exit code, the window of unacknowledged bytes, and a
silent other side given up on."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from services.actors.relay import Closing, relay
from services.domain.channels import Ack, Data, End, decode_frame, encode_frame
from services.ports import Pipe
from services.testing import MemoryBus

pytestmark = pytest.mark.anyio

DEADLINE_S = 10.0
UP, DOWN = "fgpu.tty.a1.k.c1.up", "fgpu.tty.a1.k.c1.down"


class Program:
    """A program's end: writes ``output`` in pieces, then exits with ``code``; keeps
    what it is given."""

    def __init__(self, output: list[bytes], code: int, *, wait_for: bytes = b"") -> None:
        self.output, self.code, self.given = list(output), code, b""
        self.wait_for = wait_for
        self._given = anyio.Event()

    async def read(self) -> bytes | None:
        if not self.output:
            while self.wait_for not in self.given:  # its input first, as a shell's
                await self._given.wait()
            return None
        return self.output.pop(0)

    async def write(self, data: bytes) -> None:
        self.given += data
        self._given.set()
        self._given = anyio.Event()

    async def exit_code(self) -> int | None:
        return self.code


class Keyboard:
    """A user's end: types ``keys``, then has nothing more; keeps what is shown."""

    def __init__(self, keys: list[bytes]) -> None:
        self.keys, self.shown = list(keys), b""

    async def read(self) -> bytes | None:
        return self.keys.pop(0) if self.keys else None

    async def write(self, data: bytes) -> None:
        self.shown += data


@asynccontextmanager
async def channel() -> AsyncIterator[tuple[Pipe, Pipe]]:
    bus = MemoryBus()
    async with bus.pipe(listen=UP, speak=DOWN) as agent, bus.pipe(DOWN, UP) as user:
        yield agent, user


async def test_bytes_go_both_ways_and_the_exit_code_comes_back() -> None:
    program = Program([b"hello ", b"world"], 3, wait_for=b"typed")
    keyboard = Keyboard([b"ty", b"ped"])
    ends: dict[str, Closing] = {}
    async with channel() as (agent, user):
        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as tg:

                async def agent_side() -> None:
                    ends["agent"] = await relay(agent, program, exit_code=program.exit_code)

                async def user_side() -> None:
                    ends["user"] = await relay(user, keyboard)

                tg.start_soon(agent_side)
                tg.start_soon(user_side)
    assert (program.given, keyboard.shown) == (b"typed", b"hello world")
    assert (ends["agent"].received, ends["agent"].sent) == (5, 11)
    assert (ends["agent"].exit_code, ends["user"].exit_code) == (3, 3)
    assert ends["user"].peer_ended and ends["user"].reason == "the program exited"


async def test_a_sender_stops_at_the_window_until_acknowledged() -> None:
    program = Program([b"x" * 4] * 10, 0)  # 40 bytes, through a window of 10
    async with channel() as (agent, user):
        frames = aiter(user)
        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: relay(agent, program, exit_code=program.exit_code, window=10))
                got = 0
                while got < 8:  # two chunks of 4 fit; the third would pass 10
                    frame = decode_frame(await anext(frames))
                    if isinstance(frame, Data):
                        got += len(frame.data)
                await anyio.wait_all_tasks_blocked()
                assert got == 8 and program.output  # it waits: nothing more came
                await user.send(encode_frame(Ack(got)))
                ended = None
                while ended is None:
                    frame = decode_frame(await anext(frames))
                    if isinstance(frame, Data):
                        got += len(frame.data)
                        await user.send(encode_frame(Ack(len(frame.data))))
                    elif isinstance(frame, End):
                        ended = frame
    assert (got, ended.exit_code) == (40, 0)


async def test_a_silent_other_side_is_given_up_on() -> None:
    program = Program([], 0, wait_for=b"never")
    async with channel() as (agent, _user):
        with anyio.fail_after(DEADLINE_S):
            closing = await relay(agent, program, exit_code=program.exit_code, idle_s=0.1)
    assert closing.reason == "nothing heard for 0.1 s" and closing.exit_code is None


async def test_a_side_cancelled_tells_the_other_which_closes_at_once() -> None:
    program = Program([], 0, wait_for=b"never")  # a server that says nothing first
    async with channel() as (agent, user):
        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as tg:
                closed: list[Closing] = []

                async def agent_side() -> None:
                    closed.append(await relay(agent, program, exit_code=program.exit_code))

                tg.start_soon(agent_side)
                with anyio.CancelScope() as user_side:
                    tg.start_soon(lambda: _cancelled_after_blocked(user_side))
                    await relay(user, Keyboard([b"GET /"]))
    assert program.given == b"GET /"
    assert closed[0].peer_ended and closed[0].reason == "closed by the other side's process"


async def _cancelled_after_blocked(scope: anyio.CancelScope) -> None:
    await anyio.wait_all_tasks_blocked()
    scope.cancel()
