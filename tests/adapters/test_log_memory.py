"""MemoryLog passes the EventLog contract; and its own promises as a fake."""

from collections.abc import Awaitable, Callable
from contextlib import aclosing

import anyio
import pytest

from events import Record
from events import subjects as subj
from services.adapters.memory_log import MemoryLog
from services.ports import LogError
from tests.support.log_contract import (
    DEADLINE_S,
    EventLogContract,
    PublishRaw,
    admitted,
    read_all,
    seqs,
    take,
)

QUOTA_A = subj.quota("alice")


class TestMemoryLog(EventLogContract):
    @pytest.fixture
    def events(self) -> MemoryLog:
        return MemoryLog()

    @pytest.fixture
    def publish_raw(self, events: MemoryLog) -> PublishRaw:
        async def publish(subject: str, payload: bytes) -> None:
            await events.publish_raw(subject, payload)

        return publish

    @pytest.fixture
    def made_anew(self) -> Callable[[], Awaitable[MemoryLog]]:
        async def anew() -> MemoryLog:
            return MemoryLog()  # a log in memory is made anew by making another

        return anew


class TestMemoryLogInSmallBatches(TestMemoryLog):
    """The same contract when every read hands out one record at a time."""

    @pytest.fixture
    def events(self) -> MemoryLog:
        return MemoryLog(batch_size=1)


pytestmark = pytest.mark.anyio


async def test_an_unacknowledged_batch_is_handed_out_again_at_once() -> None:
    log = MemoryLog()
    for _ in range(3):
        await log.append(QUOTA_A, admitted())
    async with aclosing(log.follow("worker")) as batches:
        assert seqs(await take(batches, 3)) == [1, 2, 3]
    async with aclosing(log.follow("worker")) as batches:
        assert seqs(await take(batches, 3)) == [1, 2, 3]  # never acknowledged
        await log.append(QUOTA_A, admitted())
        assert seqs(await take(batches, 1)) == [4]  # asking acknowledged 1-3
    async with aclosing(log.follow("worker")) as batches:
        assert seqs(await take(batches, 1)) == [4]
    await log.delete_consumer("worker")
    async with aclosing(log.follow("worker", after=3)) as batches:
        assert seqs(await take(batches, 1)) == [4]


async def test_an_id_is_remembered_for_the_logs_whole_life() -> None:
    log = MemoryLog()
    e = admitted()
    first = await log.append(QUOTA_A, e)
    for _ in range(50):
        await log.append(QUOTA_A, admitted())
    assert await log.append(QUOTA_A, e) == first


async def test_a_batch_too_large_is_refused() -> None:
    log = MemoryLog()
    items = [(QUOTA_A, admitted()) for _ in range(1001)]
    with pytest.raises(ValueError, match="at most 1000"):
        await log.append_batch(items, expect_subject=QUOTA_A, expected_last_subject_seq=0)
    assert await log.last_seq() == 0


async def test_a_batch_with_a_subject_outside_the_stream_stores_nothing() -> None:
    log = MemoryLog()
    items = [(QUOTA_A, admitted()), ("elsewhere", admitted())]
    with pytest.raises(LogError):
        await log.append_batch(items, expect_subject=QUOTA_A, expected_last_subject_seq=0)
    assert await log.last_seq() == 0


async def test_subjects_match_as_nats_does() -> None:
    log = MemoryLog(subjects=("a.*.c", "b.>"))
    await log.publish_raw("a.x.c", b"1")
    await log.publish_raw("b.x", b"2")
    await log.publish_raw("b.x.y.z", b"3")
    for subject in ("a.x", "a.x.c.d", "b", "c.x", "a..c.d"):
        with pytest.raises(LogError):
            await log.publish_raw(subject, b"x")
    assert await log.last_seq() == 3


async def test_read_until_beyond_the_end_waits_for_the_records() -> None:
    log = MemoryLog()
    await log.append(QUOTA_A, admitted())
    got: list[Record] = []

    async def reader() -> None:
        got.extend(await read_all(log, until=3))

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.wait_all_tasks_blocked()
            assert got == []
            for _ in range(3):
                await log.append(QUOTA_A, admitted())
    assert seqs(got) == [1, 2, 3]


async def test_waiting_readers_wake_on_an_append_without_polling() -> None:
    log = MemoryLog()
    woken: list[list[int]] = []

    async def follower(name: str) -> None:
        async with aclosing(log.follow(name)) as batches:
            woken.append(seqs(await anext(batches)))

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            for name in ("one", "two"):
                tg.start_soon(follower, name)
            await anyio.wait_all_tasks_blocked()
            assert woken == []
            await log.append(QUOTA_A, admitted())
    assert woken == [[1], [1]]


async def test_a_batch_wakes_readers_once_with_all_of_it() -> None:
    log = MemoryLog()

    async def first_batch() -> list[int]:
        async with aclosing(log.tail(0)) as batches:
            return seqs(await anext(batches))

    got: list[list[int]] = []

    async def tailer() -> None:
        got.append(await first_batch())

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(tailer)
            await anyio.wait_all_tasks_blocked()
            items = [(QUOTA_A, admitted()) for _ in range(3)]
            await log.append_batch(items, expect_subject=QUOTA_A, expected_last_subject_seq=0)
    assert got == [[1, 2, 3]]
