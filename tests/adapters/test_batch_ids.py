"""Every event on the log carries its id as its ``Nats-Msg-Id``, those of atomic batches
too: the first tenancy, the registrar's answers, the quota's admissions, the scheduler's
rounds, the intake's requests of several. A batch sent again is never stored twice: as
it was, its expectation refuses it; with the subject's last sequence as expectation (the
expectation alone would let it in), its ids do.
"""

from collections.abc import Sequence
from contextlib import AsyncExitStack, aclosing

import anyio
import pytest
from nats.aio.msg import Msg

from events import AnyEvent, CreateProject, SessionRequested, Slots, decode
from events import subjects as subj
from services.actors.bootstrap import bootstrap
from services.actors.common import rebuild
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.jetstream_pull import ack_seqs
from services.adapters.jetstream_readers import deliveries, read_consumer
from services.adapters.nats_connection import nats_connection
from services.adapters.system_clock import SystemClock
from services.client import Client, new_session_id
from services.domain.access.permissions import inbox
from services.domain.fold.cluster import ClusterState
from services.domain.provenance import Provenance, stamp
from services.ports import ConcurrencyConflict
from tests.support.cluster import GIB, agent_config, running_cluster
from tests.support.tenancy_env import secured_cluster, start_actors

pytestmark = pytest.mark.anyio

Batch = tuple[list[tuple[str, AnyEvent]], str, int]


class RecordingLog(JetStreamLog):
    """The log, keeping every atomic batch appended through it (to send it again)."""

    def __init__(self, log: JetStreamLog) -> None:
        super().__init__(log.client)
        self.batches: list[Batch] = []

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        seq = await super().append_batch(
            items,
            expect_subject=expect_subject,
            expected_last_subject_seq=expected_last_subject_seq,
        )
        self.batches.append((list(items), expect_subject, expected_last_subject_seq))
        return seq


async def test_every_event_carries_its_id_and_no_batch_is_stored_twice(log: JetStreamLog) -> None:
    recording = RecordingLog(log)
    clock = SystemClock()
    admin = await bootstrap(recording, clock)
    assert admin is not None
    client = Client(recording, clock, admin.access_key)
    # Asked for before the actors start: each decides them in one round, one batch.
    asked = [await client.admin(CreateProject(domain="default", project=f"p{n}")) for n in "12"]
    ids = await client.create(
        image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB, fgpu=25), count=3
    )

    def done(s: ClusterState) -> bool:
        answered = all(r not in s.admin_requests for r in asked)
        running = all(i in s.sessions and s.sessions[i].status == "RUNNING" for i in ids)
        return answered and running

    with anyio.fail_after(60):
        async with running_cluster(recording, [(agent_config("a1"), DummyRuntime())]):
            await client.wait_until(done)

    multi = {subject for items, subject, _ in recording.batches if len(items) > 1}
    assert multi >= {subj.TENANCY, subj.ADMISSION, subj.LEDGER}
    s = await rebuild(log)
    last = await log.last_seq()
    for items, subject, expected in recording.batches:
        for expecting in (expected, s.subject_seq[subject]):
            with pytest.raises(ConcurrencyConflict):
                await log.append_batch(
                    items, expect_subject=subject, expected_last_subject_seq=expecting
                )
    assert await log.last_seq() == last

    for seq in range(1, last + 1):
        msg = await log.js.get_msg(subj.STREAM, seq)
        assert msg.headers is not None and msg.data is not None
        assert msg.headers.get("Nats-Msg-Id") == decode(msg.data).id, (seq, msg.subject)


async def test_a_request_of_several_is_one_batch_on_the_log_and_a_resend_adds_nothing() -> None:
    """``session create --count 3`` through the intake, on a server with tenancy: the
    three are stored as one atomic batch; the same request handed in again (a retry with
    the same ids, or an intake that died before letting it go) stores nothing more."""
    async with secured_cluster(services=("intake",)) as c, AsyncExitStack() as stack:
        await start_actors(c, stack)
        me = c.root.access_key
        async with nats_connection(c.url, name="ana", **_as(me, c.root.secret)) as conn:
            sender = conn.sender(me)
            assert sender is not None
            three = [_create(me) for _ in range(3)]
            after = await c.setup.last_seq()
            await sender.send(three)
            await sender.send(three)  # again, the same events
            marker = _create(me)
            await sender.send([marker])  # handed after: written once the resend is let go
            with anyio.fail_after(30):
                await Client(c.setup, SystemClock(), me).wait_until(
                    lambda s: marker.session_id in s.sessions
                )
        requests = [m for m in await _stored(c.setup, after) if m.subject.startswith("fgpu.req.")]
        assert [decode(m.data) for m in requests] == [*three, marker]
        batch_ids = {(m.headers or {}).get("Nats-Batch-Id") for m in requests[:3]}
        assert len(batch_ids) == 1 and None not in batch_ids


async def _stored(log: JetStreamLog, after: int) -> list[Msg]:
    """The messages stored after ``after``, headers and all, as a read of ``log``'s
    identity delivers them."""
    end, found = await log.last_seq(), []
    what = "read with headers"
    async with (
        read_consumer(log.client, subj.STREAM, subj.STREAM_WILDCARD, after, what) as name,
        aclosing(deliveries(log.client, subj.STREAM, name, what)) as batches,
    ):
        async for msgs in batches:
            found += msgs
            if ack_seqs(msgs[-1].reply)[0] >= end:
                return found
    raise AssertionError("the read ended")


def _as(key: str, secret: str) -> dict[str, str]:
    return {"user": key, "password": secret, "inbox_prefix": inbox(key)}


def _create(key: str) -> SessionRequested:
    return stamp(
        SessionRequested,
        Provenance(key, SystemClock().now()),
        session_id=new_session_id(),
        owner=key,
        image="fgpu/busybox:latest",
        slots=Slots(cpu=100, mem=GIB, fgpu=25),
    )
