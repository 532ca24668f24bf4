"""ExitWatch misses no exit, whatever its stream of the engine's events does.

A fake engine stands in for Docker: containers are records, the stream is a memory
channel the test feeds, breaks or starves. The real engine's side is checked by the
runtime contract (``tests/adapters/test_runtime_docker.py``) and
``tests/e2e/test_agent_density.py``.
"""

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from services.adapters.docker_exits import EventStream, ExitWatch, Look
from services.ports import ContainerError, RuntimeUnavailable

pytestmark = pytest.mark.anyio
DEADLINE_S = 10.0
NOW = 1_700_000_000


def cid(n: int) -> str:
    return f"{n:064x}"


class _Stream:
    def __init__(self, receive: MemoryObjectReceiveStream[Mapping[str, Any] | None]) -> None:
        self._receive = receive

    async def next(self) -> Mapping[str, Any] | None:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            return None


class FakeEngine:
    """Containers by full id (running, exit code); ``names`` maps names to ids. The
    stream's events are what the test sends; ``opened`` counts streams, with their
    ``since``; ``up`` False refuses every call, as an engine away does."""

    def __init__(self) -> None:
        self.containers: dict[str, Look] = {}
        self.names: dict[str, str] = {}
        self.up = True
        self.since: list[int | None] = []
        self.opened = anyio.Event()
        self.look_gate: anyio.Event | None = None  # set: every look waits for it
        self._send: MemoryObjectSendStream[Mapping[str, Any] | None] | None = None

    def run(self, n: int, name: str | None = None) -> str:
        self.containers[cid(n)] = Look(cid(n), True, 0)
        if name is not None:
            self.names[name] = cid(n)
        return cid(n)

    def exit(self, full: str, code: int) -> None:
        self.containers[full] = Look(full, False, code)

    def _check(self) -> None:
        if not self.up:
            raise RuntimeUnavailable("engine away")

    async def clock(self) -> int | None:
        self._check()
        return NOW

    @asynccontextmanager
    async def events(self, since: int | None) -> AsyncIterator[EventStream]:
        self._check()
        send, receive = anyio.create_memory_object_stream[Mapping[str, Any] | None](100)
        self._send = send
        self.since.append(since)
        self.opened.set()
        with send, receive:
            yield _Stream(receive)

    async def look(self, ref: str) -> Look | None:
        self._check()
        if self.look_gate is not None:
            await self.look_gate.wait()
        return self.containers.get(self.names.get(ref, ref))

    async def running(self) -> dict[str, bool]:
        self._check()
        return {k: v.running for k, v in self.containers.items()}

    async def tell(self, action: str, full: str, **attributes: str) -> None:
        assert self._send is not None
        actor = {"ID": full, "Attributes": attributes}
        await self._send.send({"Type": "container", "Action": action, "Actor": actor})

    async def end_stream(self) -> None:
        """The engine closes the stream (it stops, or restarts)."""
        assert self._send is not None
        self.opened = anyio.Event()
        await self._send.aclose()

    async def wait_opened(self) -> None:
        with anyio.fail_after(DEADLINE_S):
            await self.opened.wait()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def watching(engine: FakeEngine, sweep_s: float = 3600) -> AsyncIterator[ExitWatch]:
    watch = ExitWatch(engine, sweep_s=sweep_s)
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.run)
        await engine.wait_opened()
        yield watch
        tg.cancel_scope.cancel()


class Waits:
    """Waits started in a task group; each one's exit code or ContainerError by ref."""

    def __init__(self, tg: TaskGroup, watch: ExitWatch) -> None:
        self._tg, self._watch = tg, watch
        self.out: dict[str, int | ContainerError] = {}
        self._done: dict[str, anyio.Event] = {}

    def start(self, ref: str) -> None:
        done = self._done[ref] = anyio.Event()

        async def waiting() -> None:
            try:
                self.out[ref] = await self._watch.wait(ref)
            except ContainerError as e:
                self.out[ref] = e
            done.set()

        self._tg.start_soon(waiting)

    async def settled(self, *refs: str) -> None:
        with anyio.fail_after(DEADLINE_S):
            for ref in refs:
                await self._done[ref].wait()


@asynccontextmanager
async def one_waiting(
    engine: FakeEngine, sweep_s: float = 3600
) -> AsyncIterator[tuple[Waits, str]]:
    """A watch of ``engine`` and one running container waited on, its waiter blocked."""
    a = engine.run(1)
    async with watching(engine, sweep_s) as watch, anyio.create_task_group() as tg:
        waits = Waits(tg, watch)
        waits.start(a)
        await anyio.wait_all_tasks_blocked()
        yield waits, a


async def test_a_die_on_the_stream_answers_every_waiter_of_it() -> None:
    engine = FakeEngine()
    a, b = engine.run(1), engine.run(2)
    async with watching(engine) as watch, anyio.create_task_group() as tg:
        waits = Waits(tg, watch)
        waits.start(a)
        waits.start(b)
        await anyio.wait_all_tasks_blocked()
        engine.exit(a, 3)
        await engine.tell("die", a, exitCode="3")
        await waits.settled(a)
        assert waits.out == {a: 3}  # the other still waits
        engine.exit(b, 137)
        await engine.tell("die", b, exitCode="137")
        await waits.settled(b)
    assert waits.out == {a: 3, b: 137}


async def test_a_container_that_has_exited_is_answered_at_once_by_name_too() -> None:
    engine = FakeEngine()
    full = engine.run(1, name="s1")
    engine.exit(full, 7)
    async with watching(engine) as watch:
        with anyio.fail_after(DEADLINE_S):
            assert await watch.wait("s1") == 7
            assert await watch.wait(full) == 7


async def test_an_unknown_container_is_an_error() -> None:
    engine = FakeEngine()
    async with watching(engine) as watch:
        with pytest.raises(ContainerError, match="no such container"):
            await watch.wait("no-such")
        with pytest.raises(ContainerError, match="no such container"):
            await watch.wait(cid(9))


async def test_the_stream_asks_for_the_events_since_a_second_before_the_engine_clock() -> None:
    engine = FakeEngine()
    async with watching(engine):
        assert engine.since == [NOW - 1]


async def test_a_replayed_die_of_a_removed_container_does_not_answer_its_waiter() -> None:
    # The stream replays the last second's events: a die heard while the look is under
    # way may be that of a container already removed, as the look then says.
    engine = FakeEngine()
    a = engine.run(1)
    async with watching(engine) as watch, anyio.create_task_group() as tg:
        waits = Waits(tg, watch)
        del engine.containers[a]
        engine.look_gate = anyio.Event()
        waits.start(a)
        await anyio.wait_all_tasks_blocked()
        await engine.tell("die", a, exitCode="137")
        await anyio.wait_all_tasks_blocked()
        engine.look_gate.set()
        await waits.settled(a)
    assert isinstance(waits.out[a], ContainerError)


async def test_a_die_heard_during_the_look_of_a_running_container_answers_after_it() -> None:
    engine = FakeEngine()
    a = engine.run(1)
    async with watching(engine) as watch, anyio.create_task_group() as tg:
        waits = Waits(tg, watch)
        engine.look_gate = anyio.Event()
        waits.start(a)
        await anyio.wait_all_tasks_blocked()
        await engine.tell("die", a, exitCode="5")  # the look read it running just before
        await anyio.wait_all_tasks_blocked()
        engine.look_gate.set()
        await waits.settled(a)
    assert waits.out == {a: 5}


async def test_an_exit_while_the_stream_was_down_is_found_when_it_is_back() -> None:
    # The engine restarts: the stream ends, the container exits meanwhile (the die is
    # never told), the engine answers again. The sweep after reconnecting finds it.
    engine = FakeEngine()
    async with one_waiting(engine) as (waits, a):
        engine.up = False
        await engine.end_stream()
        engine.exit(a, 143)
        engine.up = True
        await engine.wait_opened()
        await waits.settled(a)
    assert waits.out == {a: 143}
    assert len(engine.since) == 2


async def test_a_wait_begun_while_the_engine_is_away_is_told_once_it_is_back() -> None:
    engine = FakeEngine()
    a = engine.run(1)
    async with watching(engine) as watch, anyio.create_task_group() as tg:
        waits = Waits(tg, watch)
        engine.up = False
        waits.start(a)  # its look is refused
        await anyio.wait_all_tasks_blocked()
        await engine.end_stream()
        engine.exit(a, 2)
        engine.up = True
        await waits.settled(a)
    assert waits.out == {a: 2}


async def test_a_container_gone_while_the_stream_was_down_fails_its_waiter() -> None:
    engine = FakeEngine()
    async with one_waiting(engine) as (waits, a):
        await engine.end_stream()
        del engine.containers[a]
        await waits.settled(a)
    assert isinstance(waits.out[a], ContainerError)


async def test_a_die_the_engine_dropped_is_found_by_the_next_sweep() -> None:
    engine = FakeEngine()
    async with one_waiting(engine, sweep_s=0.01) as (waits, a):
        engine.exit(a, 1)  # and no event at all
        await waits.settled(a)
    assert waits.out == {a: 1}


async def test_a_destroy_without_a_die_fails_the_waiter() -> None:
    engine = FakeEngine()
    async with one_waiting(engine) as (waits, a):
        del engine.containers[a]
        await engine.tell("destroy", a)
        await waits.settled(a)
    assert isinstance(waits.out[a], ContainerError)


async def test_waiters_left_when_the_watch_stops_are_told_the_engine_is_away() -> None:
    engine = FakeEngine()
    a = engine.run(1)
    watch = ExitWatch(engine)
    async with anyio.create_task_group() as outer:
        waits = Waits(outer, watch)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run)
            await engine.wait_opened()
            waits.start(a)
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        await waits.settled(a)
    assert isinstance(waits.out[a], RuntimeUnavailable)
