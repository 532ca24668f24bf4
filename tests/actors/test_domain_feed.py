"""The domain feed on its fakes (MemoryLog, MemoryDomainFeed): each domain's records of the
log in order, nothing of another's, a request that names a session it did not make kept
out of that session's domain, and nothing lost or doubled across a restart; the readers'
consumers kept as the tenancy says (MemoryReaderConsumers)."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import anyio
import pytest

from events import (
    AdminCommand,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateServiceKey,
    CreateUser,
    DestroyRejected,
    PipelineRunRequested,
    PipelineSpec,
    PipelineTask,
    PipelineTasksEnded,
    RevokeKeypair,
    SessionRejected,
    SessionRequested,
    Slots,
    TaskEnd,
    encode,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.actors.domain_feed import DomainFeedActor
from services.actors.reader_consumers import ReaderConsumersActor
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.domain.provenance import Provenance, stamp
from services.domain.subject_rules import SUBJECT_OF
from services.testing.memory_domains import MemoryDomainFeed, MemoryReaderConsumers

pytestmark = pytest.mark.anyio
SMALL = Slots(cpu=1000, mem=1 << 30, fgpu=50)


async def _tenancy(log: MemoryLog, *commands: AdminCommand) -> None:
    for c in commands:
        await log.append(subj.TENANCY, system_applied(c, SystemClock()))


async def _two_domains(log: MemoryLog) -> None:
    await _tenancy(
        log,
        CreateDomain(domain="lab"),
        CreateDomain(domain="other"),
        CreateProject(domain="lab", project="a"),
        CreateProject(domain="other", project="x"),
        CreateUser(user="ana", domain="lab", projects=("a",)),
        CreateUser(user="olga", domain="other", projects=("x",)),
        CreateKeypair(access_key="AKana", user="ana", secret_hash="-"),
        CreateKeypair(access_key="AKolga", user="olga", secret_hash="-"),
    )


def _ask(key: str, sid: str) -> SessionRequested:
    return stamp(
        SessionRequested,
        Provenance(key, datetime(2026, 1, 1, tzinfo=UTC)),
        session_id=sid,
        owner=key,
        image="fgpu/busybox:latest",
        slots=SMALL,
    )


@asynccontextmanager
async def feeding(log: MemoryLog, feed: MemoryDomainFeed) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        await tg.start(DomainFeedActor(log, feed).run)
        yield
        tg.cancel_scope.cancel()


async def _fed_through(feed: MemoryDomainFeed, log: MemoryLog, last: int) -> None:
    """Until the feed has read the log up to ``last`` (a record of a domain written last)."""
    with anyio.fail_after(10):
        await feed.through(last)


async def test_each_domain_gets_its_records_in_order_and_nothing_else() -> None:
    log, feed = MemoryLog(), MemoryDomainFeed()
    await _two_domains(log)
    async with feeding(log, feed):
        ana = await log.append(subj.request("AKana", "s1"), _ask("AKana", "s1"))
        await log.append(subj.request("AKolga", "s2"), _ask("AKolga", "s2"))
        # olga asks for ana's session id: olga's record, not the session's
        taken = await log.append(subj.request("AKolga", "s1"), _ask("AKolga", "s1"))
        await _fed_through(feed, log, taken)
    lab, other = feed.of("lab"), feed.of("other")
    assert [r.seq for r in lab] == sorted(r.seq for r in lab)
    assert ana in [r.seq for r in lab] and taken not in [r.seq for r in lab]
    assert taken in [r.seq for r in other]
    assert not any("AKolga" in encode(r.event).decode() for r in lab)  # type: ignore[arg-type]
    assert not any("AKana" in encode(r.event).decode() for r in other)  # type: ignore[arg-type]
    # The tenancy's records of each domain: its making, its project and user, its keys.
    assert {type(r.event).__name__ for r in lab} >= {"AdminApplied", "SessionRequested"}


async def test_a_feed_started_again_goes_on_where_it_stopped() -> None:
    log, feed = MemoryLog(), MemoryDomainFeed()
    await _two_domains(log)
    async with feeding(log, feed):
        first = await log.append(subj.request("AKana", "s1"), _ask("AKana", "s1"))
        await _fed_through(feed, log, first)
    fed = list(feed.written)
    second = await log.append(subj.request("AKana", "s2"), _ask("AKana", "s2"))
    async with feeding(log, feed):
        await _fed_through(feed, log, second)
    assert feed.written[: len(fed)] == fed
    assert [r.seq for _, r in feed.written[len(fed) :]] == [second]


async def test_the_feed_lets_go_of_ended_sessions_and_still_places_their_records() -> None:
    log, feed = MemoryLog(), MemoryDomainFeed()
    await _two_domains(log)
    quota = Provenance("SKq", datetime(2026, 1, 1, tzinfo=UTC))
    actor = DomainFeedActor(log, feed)
    async with anyio.create_task_group() as tg:
        await tg.start(actor.run)
        for n in range(20):
            await log.append(subj.request("AKana", f"s{n}"), _ask("AKana", f"s{n}"))
            no = stamp(
                SessionRejected, quota, session_id=f"s{n}", owner="AKana", code="x", reason="x"
            )
            await log.append(SUBJECT_OF[SessionRejected](no), no)
        # Of s0's, after its end, by a key of no domain: the session's domain's still.
        late = stamp(DestroyRejected, quota, session_id="s0", requester="SKq", reason="ended")
        late_seq = await log.append(SUBJECT_OF[DestroyRejected](late), late)
        # olga asks for s0's id: hers alone, as while s0 was alive.
        taken = await log.append(subj.request("AKolga", "s0"), _ask("AKolga", "s0"))
        await _fed_through(feed, log, taken)
        tg.cancel_scope.cancel()
    s = actor.state
    assert not s.sessions and len(s.ended) == 20
    # What it keeps of them: 16-byte digests, by domain.
    assert list(actor.ended) == ["lab"] and len(actor.ended["lab"]) == 20
    assert len(actor.ended_requests) == 20
    assert not s.changed and not s.answered
    assert not [k for k in s.subject_seq if k.startswith(subj.request("AKana", ""))]
    lab = [r.seq for r in feed.of("lab")]
    assert late_seq in lab and taken not in lab
    assert taken in [r.seq for r in feed.of("other")]
    # Started again, it folds the log up to there as it went: the same placement.
    fed = len(feed.written)
    more = stamp(DestroyRejected, quota, session_id="s1", requester="SKq", reason="ended")
    more_seq = await log.append(SUBJECT_OF[DestroyRejected](more), more)
    async with feeding(log, feed):
        await _fed_through(feed, log, more_seq)
    assert [(d, r.seq) for d, r in feed.written[fed:]] == [("lab", more_seq)]


def _run(key: str, run_id: str) -> PipelineRunRequested:
    task = PipelineTask(name="a", image="fgpu/busybox:latest", command=("true",), slots=SMALL)
    return stamp(
        PipelineRunRequested,
        Provenance(key, datetime(2026, 1, 1, tzinfo=UTC)),
        run_id=run_id,
        requester=key,
        spec=PipelineSpec(name="p", tasks=(task,)),
    )


async def test_a_pipeline_runs_records_go_to_the_domain_of_its_first_request() -> None:
    log, feed = MemoryLog(), MemoryDomainFeed()
    await _two_domains(log)
    actor = Provenance("SKpipeline", datetime(2026, 1, 1, tzinfo=UTC))

    def ended(attempt: int) -> PipelineTasksEnded:
        one = TaskEnd(task="a", attempt=attempt, outcome="succeeded")
        return stamp(PipelineTasksEnded, actor, run_id="r1", round=1, ends=(one,))

    async with feeding(log, feed):
        asked = await log.append(subj.request("AKana", "r1"), _run("AKana", "r1"))
        # olga asks for ana's run id: hers alone, and it takes nothing of ana's run.
        taken = await log.append(subj.request("AKolga", "r1"), _run("AKolga", "r1"))
        # The actor's record names the run only.
        end = await log.append(SUBJECT_OF[PipelineTasksEnded](ended(1)), ended(1))
        await _fed_through(feed, log, end)
    assert [r.seq for r in feed.of("lab")][-2:] == [asked, end]
    assert taken in [r.seq for r in feed.of("other")]
    assert end not in [r.seq for r in feed.of("other")]
    # Started again, it folds the log up to there as it went: the same placement.
    fed = len(feed.written)
    again = await log.append(SUBJECT_OF[PipelineTasksEnded](ended(2)), ended(2))
    async with feeding(log, feed):
        await _fed_through(feed, log, again)
    assert [(d, r.seq) for d, r in feed.written[fed:]] == [("lab", again)]


async def test_readers_consumers_follow_the_tenancy() -> None:
    log, consumers = MemoryLog(), MemoryReaderConsumers()
    await _two_domains(log)
    await _tenancy(
        log,
        CreateServiceKey(access_key="RKall", service="reader", secret_hash="-"),
        CreateServiceKey(access_key="RKlab", service="reader:lab", secret_hash="-"),
        CreateServiceKey(access_key="SKq", service="quota", secret_hash="-"),
    )
    actor = ReaderConsumersActor(log, consumers)
    async with anyio.create_task_group() as tg:
        await tg.start(actor.run)
        with anyio.fail_after(10):
            await consumers.until(lambda there: there == {"RKall": None, "RKlab": "lab"})
        asked = consumers.asked
        await _tenancy(log, RevokeKeypair(access_key="RKlab"))
        with anyio.fail_after(10):
            await consumers.until(lambda there: "RKlab" not in there)
        await _tenancy(log, CreateDomain(domain="third"))  # a change of no reader's
        last = await log.last_seq()
        for _ in range(1000):  # until the actor has folded it
            if actor.state.last_seq >= last:
                break
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert actor.state.last_seq >= last
    assert consumers.there == {"RKall": None}
    assert consumers.asked == asked + 1  # one change, one call: not one a batch
