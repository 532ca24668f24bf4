"""What the intake's queue and its senders promise (``services.ports.IntakeQueue``,
``RequestSender``), as one test class to subclass: a subclass provides the fixture
``intake`` (an ``Intake``). Run against MemoryIntake and the intake stream on JetStream
(``test_intake_queue.py``)."""

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio
import pytest

from events import SessionDestroyRequested, decode_many
from services.domain.provenance import Provenance, stamp
from services.ports import Handed, IntakeQueue, RequestSender, RequestsRefused

__all__ = ["BACKLOG", "Intake", "IntakeContract"]

BACKLOG = 16  # what both keep waiting per key


@dataclass
class Intake:
    queue: IntakeQueue
    sender: Callable[[str], RequestSender]
    expire: Callable[[], None]  # what is handed out and not let go of comes again (in time)


def _ask(key: str, n: int) -> SessionDestroyRequested:
    return stamp(
        SessionDestroyRequested,
        Provenance(key, datetime(2026, 1, 1, tzinfo=UTC)),
        session_id=f"s{n}",
        requester=key,
    )


async def _take(batches: AsyncGenerator[list[Handed], None], n: int) -> list[Handed]:
    """The next ``n`` messages handed out (empty batches skipped)."""
    found: list[Handed] = []
    with anyio.fail_after(40):
        async for batch in batches:
            found += batch
            if len(found) >= n:
                break
    return found


async def _room_again(sender: RequestSender) -> None:
    """A key's next request is taken once those waiting are through: at once in memory,
    once the server has applied the acknowledgements on JetStream."""
    with anyio.fail_after(10):
        for _ in range(1000):
            try:
                await sender.send([_ask("ana", BACKLOG + 1)])
                return
            except RequestsRefused:
                await anyio.sleep(0.01)


class IntakeContract:
    async def test_requests_come_out_oldest_first_with_their_key(self, intake: Intake) -> None:
        await intake.sender("ana").send([_ask("ana", 1), _ask("ana", 2)])
        await intake.sender("bob").send([_ask("bob", 3)])
        await intake.sender("ana").send([_ask("ana", 4)])
        async with aclosing(intake.queue.handed()) as batches:
            got = await _take(batches, 3)
            assert [h.key for h in got] == ["ana", "bob", "ana"]
            ids = [[e.session_id for e in decode_many(h.data)] for h in got]  # type: ignore[union-attr]
            assert ids == [["s1", "s2"], ["s3"], ["s4"]]
            for h in got:
                await h.done()

    async def test_a_key_with_its_backlog_waiting_is_refused_and_only_it(
        self, intake: Intake
    ) -> None:
        ana = intake.sender("ana")
        for n in range(BACKLOG):
            await ana.send([_ask("ana", n)])
        with pytest.raises(RequestsRefused):
            await ana.send([_ask("ana", BACKLOG)])
        await intake.sender("bob").send([_ask("bob", 0)])  # another key waits on nobody
        async with aclosing(intake.queue.handed()) as batches:
            got = await _take(batches, BACKLOG + 1)
            for h in got:
                await h.done()
        await _room_again(ana)

    async def test_one_not_let_go_of_is_handed_again(self, intake: Intake) -> None:
        await intake.sender("ana").send([_ask("ana", 1)])
        await intake.sender("ana").send([_ask("ana", 2)])
        async with aclosing(intake.queue.handed()) as batches:
            first, second = await _take(batches, 2)
            await second.done()
            intake.expire()
            [again] = await _take(batches, 1)
            assert (again.key, again.data) == (first.key, first.data)
            await again.done()
