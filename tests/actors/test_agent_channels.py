"""The agent's channels (``services.actors.agent_channels``) over the in-memory bus and log,
with a runtime whose programs echo: an agent holds at most so many open, and gives one
back when it closes; a program that cannot start is a refusal, closed on the log."""

import dataclasses
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import anyio
import pytest

from events import RevokeKeypair, SessionChannelClosed, SessionChannelOpened
from events import subjects as subj
from services.actors.agent_channels import Channels, Opening
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.domain.channels import (
    CHUNK_BYTES,
    WINDOW_BYTES,
    End,
    Program,
    decode_frame,
    encode_frame,
    logs_program,
)
from services.ports import ContainerError, ExecChannel, OutputFollow
from services.testing import MemoryBus
from tests.support.access_state import tenancy

pytestmark = pytest.mark.anyio

DEADLINE_S = 10.0


class _Echo:
    """A program that gives back what it is given, until its input is closed."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[bytes](16)

    async def read(self) -> bytes | None:
        try:
            return await self.receive.receive()
        except anyio.EndOfStream:
            return None

    async def write(self, data: bytes) -> None:
        await self.send.send(data)

    async def resize(self, rows: int, cols: int) -> None:
        pass

    async def exit_code(self) -> int | None:
        return 0


class EchoRuntime(DummyRuntime):
    """Programs that echo, in containers whose id starts with ``c``; none in the others."""

    @asynccontextmanager
    async def open_exec(
        self,
        container_id: str,
        argv: Sequence[str],
        *,
        tty: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ExecChannel]:
        if not container_id.startswith("c"):
            raise ContainerError(f"container {container_id} is not running")
        echo = _Echo()
        with echo.send, echo.receive:
            yield echo


class _Endless:
    """A container's output that never ends, counting what was read of it."""

    def __init__(self) -> None:
        self.given = 0

    async def read(self) -> bytes | None:
        self.given += CHUNK_BYTES
        return b"x" * CHUNK_BYTES


class ChattyRuntime(EchoRuntime):
    """Containers whose output never ends (``follow_logs``)."""

    def __init__(self) -> None:
        super().__init__()
        self.output = _Endless()

    @asynccontextmanager
    async def follow_logs(
        self, container_id: str, *, tail: int = 200
    ) -> AsyncIterator[OutputFollow]:
        yield self.output


def _opening(channel: str, container: str = "c1", program: Program | None = None) -> Opening:
    program = program or Program(kind="app", argv=("nc",), target="80")
    return Opening(
        session_id="s1",
        requester="AKana",
        channel=channel,
        correlation_id="corr",
        container_id=container,
        program=program,
    )


async def _events(log: MemoryLog, n: int) -> list[SessionChannelOpened | SessionChannelClosed]:
    found: list[SessionChannelOpened | SessionChannelClosed] = []
    with anyio.fail_after(DEADLINE_S):
        async for batch in log.tail(0, subject=subj.agent_exec("a1", "s1")):
            found += [r.event for r in batch]  # type: ignore[misc]
            if len(found) >= n:
                return found
    raise AssertionError("the log ended")


async def test_an_agent_holds_so_many_open_and_gives_one_back_when_it_closes() -> None:
    bus, log = MemoryBus(), MemoryLog()
    channels = Channels("a1", EchoRuntime(), bus, log, SystemClock(), max_open=1)
    async with anyio.create_task_group() as tg:
        await tg.start(channels.run)
        assert await channels.open(_opening("first")) is None
        refused = await channels.open(_opening("second"))
        assert refused == "agent a1 has 1 channels open, its most: later"
        up, _ = subj.channel("a1", "AKana", "first")
        async with bus.pipe(listen="nobody", speak=up) as user:
            await user.send(encode_frame(End(reason="done")))
        opened, closed = await _events(log, 2)  # the refused one wrote nothing
        assert isinstance(opened, SessionChannelOpened) and opened.channel == "first"
        assert isinstance(closed, SessionChannelClosed) and closed.reason == "done"
        assert await channels.open(_opening("third")) is None
        tg.cancel_scope.cancel()


async def test_one_key_holds_so_many_open_and_leaves_the_rest_to_the_others() -> None:
    """A tenant who opens channels without end (pages, follows, app requests) takes its
    own share of the agent's, never the room another key needs."""
    bus, log = MemoryBus(), MemoryLog()
    channels = Channels("a1", EchoRuntime(), bus, log, SystemClock(), max_per_key=2)
    async with anyio.create_task_group() as tg:
        await tg.start(channels.run)
        assert await channels.open(_opening("a")) is None
        assert await channels.open(_opening("b")) is None
        refused = await channels.open(_opening("c"))
        assert refused == "AKana has 2 channels open on agent a1, its most"
        other = dataclasses.replace(_opening("d"), requester="AKbob")
        assert await channels.open(other) is None  # another key still gets one
        up, _ = subj.channel("a1", "AKana", "a")
        async with bus.pipe(listen="nobody", speak=up) as user:
            await user.send(encode_frame(End(reason="done")))
        await _events(log, 4)  # three opened (the refused one wrote nothing), one closed
        assert await channels.open(_opening("e")) is None  # its place was given back
        tg.cancel_scope.cancel()


async def test_a_program_that_cannot_start_is_refused_and_closed_on_the_log() -> None:
    log = MemoryLog()
    channels = Channels("a1", EchoRuntime(), MemoryBus(), log, SystemClock(), max_open=1)
    async with anyio.create_task_group() as tg:
        await tg.start(channels.run)
        refused = await channels.open(_opening("c9", container="x1"))
        assert refused == "container x1 is not running"
        opened, closed = await _events(log, 2)
        assert isinstance(closed, SessionChannelClosed) and closed.causation_id == opened.id
        assert closed.reason == "could not open: container x1 is not running"
        assert await channels.open(_opening("c10")) is None  # its place was given back
        tg.cancel_scope.cancel()


async def test_a_channel_is_cut_once_its_key_is_revoked_and_says_why() -> None:
    bus, log = MemoryBus(), MemoryLog()
    channels = Channels("a1", EchoRuntime(), bus, log, SystemClock())
    revoked = tenancy(RevokeKeypair(access_key="AKana"))
    why = "access key AKana was revoked"
    async with anyio.create_task_group() as tg:
        await tg.start(channels.run)
        await channels.cut_refused(tenancy())  # a live key: nothing is cut
        assert await channels.open(_opening("first")) is None
        _, down = subj.channel("a1", "AKana", "first")
        async with bus.pipe(listen=down, speak="nobody") as user:
            await channels.cut_refused(revoked)
            with anyio.fail_after(DEADLINE_S):
                assert await _end(user) == End(reason=why)
        opened, closed = await _events(log, 2)
        assert isinstance(opened, SessionChannelOpened)
        assert isinstance(closed, SessionChannelClosed) and closed.reason == why
        assert channels.open_now == 0
        # One allowed on an older fold, opening once the revocation is folded: cut too.
        assert await channels.open(_opening("second")) is None
        [*_, late] = await _events(log, 4)
        assert isinstance(late, SessionChannelClosed) and late.channel == "second"
        assert late.reason == why
        tg.cancel_scope.cancel()


async def test_a_follow_nobody_reads_reads_no_more_than_a_window_of_the_output() -> None:
    """The user's side hears the channel and acknowledges nothing: the agent stops
    reading the container's output once a window is unacknowledged, however much more
    the container has written (what piles up is the engine's, not the agent's)."""
    bus, runtime = MemoryBus(), ChattyRuntime()
    channels = Channels("a1", runtime, bus, MemoryLog(), SystemClock())
    _, down = subj.channel("a1", "AKana", "f1")
    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg, bus.pipe(listen=down, speak="nobody"):
            await tg.start(channels.run)
            assert await channels.open(_opening("f1", program=logs_program(10))) is None
            await anyio.wait_all_tasks_blocked()
            assert WINDOW_BYTES <= runtime.output.given <= WINDOW_BYTES + CHUNK_BYTES
            tg.cancel_scope.cancel()


async def _end(frames: AsyncIterable[bytes]) -> End:
    """The first End among ``frames`` (what the agent's side sends the user's)."""
    async for raw in frames:
        if isinstance(frame := decode_frame(raw), End):
            return frame
    raise AssertionError("the pipe closed without End")
