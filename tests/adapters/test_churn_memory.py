"""What a process keeps as sessions come and go is bounded by what is alive, not by how
many came and went (bench/soak.py measures the memory of ``fgpu up`` under churn): the
domain feed's connection holds one subscription however many batches it feeds."""

from datetime import UTC, datetime

import pytest

from events import Record, SessionRequested, Slots
from events import subjects as subj
from services.adapters.jetstream import JetStreamLog
from services.adapters.jetstream_domains import JetStreamDomainFeed
from services.domain.provenance import Provenance, stamp

pytestmark = pytest.mark.anyio
SMALL = Slots(cpu=1000, mem=1 << 30, fgpu=50)


def _asked(seq: int) -> Record:
    sid = f"s{seq}"
    e = stamp(
        SessionRequested,
        Provenance("AKana", datetime(2026, 1, 1, tzinfo=UTC)),
        session_id=sid,
        owner="AKana",
        image="fgpu/busybox:latest",
        slots=SMALL,
    )
    return Record(seq=seq, subject=subj.request("AKana", sid), event=e)


async def test_the_domain_feed_subscribes_once_however_many_batches_it_feeds(
    log: JetStreamLog,
) -> None:
    feed = JetStreamDomainFeed(log.client)
    await feed.feed([("lab", _asked(1))])
    subscriptions = len(log.nc._subs)  # nats-py's own count: none is exposed
    for seq in range(2, 22):
        await feed.feed([("lab", _asked(seq))])
    assert len(log.nc._subs) == subscriptions  # before: one more per batch
    assert await feed.last_fed() == 21
