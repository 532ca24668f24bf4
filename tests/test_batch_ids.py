"""Every event on the log carries its id as its ``Nats-Msg-Id``, those of atomic batches
too: the first tenancy, the registrar's answers, the quota's admissions, the scheduler's
rounds. A batch sent again is never stored twice: as it was, its expectation refuses it;
with the subject's last sequence as expectation (the expectation alone would let it in),
its ids do.
"""

from collections.abc import Sequence

import anyio
import pytest

from events import AnyEvent, CreateProject, Slots, decode
from events import subjects as subj
from services.actors.bootstrap import bootstrap
from services.actors.common import rebuild
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.state import ClusterState
from services.ports import ConcurrencyConflict
from tests.cluster import GIB, agent_config, running_cluster

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
