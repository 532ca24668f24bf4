"""The intake actor on its fakes (MemoryIntake, MemoryLog) and a clock moved by the test:
what it writes, in which order, what it drops and says, and nothing lost or doubled when
a message is handed again."""

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NoReturn

import anyio
import pytest

from events import (
    AdminRequested,
    AnyEvent,
    CreateDomain,
    RequestsDropped,
    SessionDestroyRequested,
    SessionRequested,
    Slots,
)
from events import subjects as subj
from services.actors.intake import IntakeActor
from services.adapters.memory_log import MemoryLog
from services.adapters.virtual_clock import VirtualClock
from services.domain.intake import Drops, KeyRates
from services.domain.provenance import Provenance, stamp
from services.ports import Handed, LogError
from services.testing.memory_intake import MemoryIntake

pytestmark = pytest.mark.anyio
SMALL = Slots(cpu=1000, mem=1 << 30, fgpu=50)


@dataclass
class Running:
    intake: MemoryIntake
    log: MemoryLog
    clock: VirtualClock

    async def settled(self) -> None:
        """Until every message handed in is let go of (written or counted)."""
        with anyio.fail_after(10):
            await self.intake.drained()

    async def stored(self) -> list[tuple[str, object]]:
        found: list[tuple[str, object]] = []
        async for batch in self.log.read(0):
            found += [(r.subject, r.event) for r in batch]
        return found


@asynccontextmanager
async def running(
    rate: float = 1000, burst: int = 1000, window_s: float = 10
) -> AsyncIterator[Running]:
    intake, log, clock = MemoryIntake(wait_s=0.01), MemoryLog(), VirtualClock()
    actor = IntakeActor(intake, log, clock, rates=KeyRates(rate, burst), drops=Drops(window_s))
    async with anyio.create_task_group() as tg:
        await tg.start(actor.run)
        yield Running(intake, log, clock)
        tg.cancel_scope.cancel()


def _create(key: str, sid: str) -> SessionRequested:
    return stamp(
        SessionRequested,
        Provenance(key, datetime(2026, 1, 1, tzinfo=UTC)),
        session_id=sid,
        owner=key,
        image="fgpu/busybox:latest",
        slots=SMALL,
    )


def _destroy(key: str, sid: str, requester: str | None = None) -> SessionDestroyRequested:
    return stamp(
        SessionDestroyRequested,
        Provenance(key, datetime(2026, 1, 1, tzinfo=UTC)),
        session_id=sid,
        requester=requester or key,
    )


async def test_requests_go_on_their_subjects_in_the_order_handed_in() -> None:
    async with running() as r:
        ask = stamp(
            AdminRequested,
            Provenance("ana", r.clock.now()),
            requester="ana",
            command=CreateDomain(domain="d"),
        )
        c1, c2, d1 = _create("ana", "s1"), _create("ana", "s2"), _destroy("ana", "s1")
        await r.intake.sender("ana").send([c1, c2])
        await r.intake.sender("bob").send([_create("bob", "s9")])
        await r.intake.sender("ana").send([d1])
        await r.intake.sender("ana").send([ask])
        await r.settled()
        stored = await r.stored()
    assert stored[:2] == [(subj.request("ana", "s1"), c1), (subj.request("ana", "s2"), c2)]
    ana = [(s, e) for s, e in stored if s.split(".")[2] == "ana"]
    assert ana == [
        (subj.request("ana", "s1"), c1),
        (subj.request("ana", "s2"), c2),
        (subj.request("ana", "s1"), d1),
        (subj.admin("ana", ask.id), ask),
    ]
    assert [s for s, _ in stored].count(subj.request("bob", "s9")) == 1


async def test_a_flood_is_written_at_its_rate_and_said_in_one_record_a_window() -> None:
    async with running(rate=2, burst=3, window_s=10) as r:
        flood = r.intake.sender("eve")
        for n in range(16):  # as many as the intake keeps waiting of a key
            await flood.send([_create("eve", f"s{n}")])
        await r.intake.sender("ana").send([_create("ana", "mine")])
        await r.settled()
        r.clock.at += timedelta(seconds=1)  # two more tokens
        for n in range(40, 45):
            await flood.send([_create("eve", f"s{n}")])
        await r.settled()
        r.clock.at += timedelta(seconds=10)  # the window ends: what was counted is said
        await r.intake.sender("ana").send([_create("ana", "again")])
        await r.settled()
        stored = await r.stored()
    written = [e for s, e in stored if s.startswith("fgpu.req.eve.")]
    assert [e.session_id for e in written] == ["s0", "s1", "s2", "s40", "s41"]  # type: ignore[attr-defined]
    said = [e for _, e in stored if isinstance(e, RequestsDropped)]
    assert [(d.owner, d.rate_limited, d.refused) for d in said] == [("eve", 13, 0), ("eve", 3, 0)]
    assert {s for s, e in stored if isinstance(e, RequestsDropped)} == {subj.access("intake")}
    assert [s for s, _ in stored].count(subj.request("ana", "mine")) == 1


async def test_what_may_never_stand_is_refused_and_said() -> None:
    async with running() as r:
        eve = r.intake.sender("eve")
        await eve.send([_destroy("eve", "s1", requester="ana")])
        r.intake.hand("eve", b"not an event")
        await r.settled()
        stored = await r.stored()
    [said] = [e for _, e in stored if isinstance(e, RequestsDropped)]
    assert (said.owner, said.refused, said.reason) == (
        "eve",
        2,
        "a request of eve in the name of ana",
    )
    assert [s for s, _ in stored] == [subj.access("intake")]


async def test_a_message_handed_again_is_written_once() -> None:
    """A crash between the write and the let-go: the message comes again, and the log's
    dedupe on each event's id keeps one of each."""
    intake, log, clock = MemoryIntake(wait_s=0.01), MemoryLog(), VirtualClock()
    c1, c2 = _create("ana", "s1"), _create("ana", "s2")
    await intake.sender("ana").send([c1, c2])

    class Crashing:
        """Hands out, never lets go: the intake dies after writing."""

        async def handed(self) -> AsyncIterator[list[Handed]]:
            async for batch in intake.handed():

                async def never() -> None:
                    return None

                yield [Handed(h.key, h.data, never) for h in batch]

    actor = IntakeActor(Crashing(), log, clock)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await tg.start(actor.run)
        with anyio.fail_after(10):
            async with aclosing(log.tail(0)) as batches:
                async for _ in batches:
                    if await log.last_seq() == 2:
                        break
        tg.cancel_scope.cancel()
    intake.expire()
    async with anyio.create_task_group() as tg:
        await tg.start(IntakeActor(intake, log, clock).run)
        with anyio.fail_after(10):
            await intake.drained()
        tg.cancel_scope.cancel()
    stored = [(r.subject, r.event) async for batch in log.read(0) for r in batch]
    assert stored == [(subj.request("ana", "s1"), c1), (subj.request("ana", "s2"), c2)]


class FillsUp(MemoryLog):
    """A log with room for ``room`` more events: an atomic batch that does not fit stores
    nothing, pipelined events are stored until there is no room (as JetStream does with a
    full disk or a stream's limit); ``refused`` is set at each refusal."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room
        self.refused = anyio.Event()

    def _refuse(self) -> NoReturn:
        self.refused.set()
        raise LogError("no space left on the log's disk")

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        if len(items) > self.room:
            self._refuse()
        seq = await super().append_batch(
            items,
            expect_subject=expect_subject,
            expected_last_subject_seq=expected_last_subject_seq,
        )
        self.room -= len(items)
        return seq

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        seqs = []
        for subject, event in items:
            if self.room < 1:
                self._refuse()
            seqs.append(await self.append(subject, event))
            self.room -= 1
        return seqs


async def test_requests_handed_together_are_written_all_or_none() -> None:
    """``session create --count 3`` while the log has room for one: none of the three is
    stored (not one of them, to run while the user is told it failed); once there is
    room, all three, once each."""
    intake, log, clock = MemoryIntake(wait_s=0.01), FillsUp(room=1), VirtualClock()
    three = [_create("ana", f"s{n}") for n in range(3)]
    await intake.sender("ana").send(three)
    async with anyio.create_task_group() as tg:
        await tg.start(IntakeActor(intake, log, clock).run)
        with anyio.fail_after(10):
            await log.refused.wait()
        assert await log.last_seq() == 0
        log.room = 10
        intake.expire()  # its time is up: handed again
        with anyio.fail_after(10):
            await intake.drained()
        tg.cancel_scope.cancel()
    stored = [(r.subject, r.event) async for batch in log.read(0) for r in batch]
    assert stored == [(subj.request("ana", e.session_id), e) for e in three]
