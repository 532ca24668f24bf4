"""A corrupt snapshot, on the real object store, is found at once by checking it (never by
waiting for chunks that are not coming), said as corrupt with the reason, and replaced by
a full replay: each kind of damage an operator may meet (chunks that do not match the
digest or the size, a truncated object, chunks gone, a meta naming chunks that are not
there, bytes that are no snapshot)."""

import base64
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import pytest
from nats.js.errors import NotFoundError
from structlog.testing import capture_logs

from events import Slots
from events import subjects as subj
from services.actors.common import rebuild
from services.actors.snapshots import Snapshots
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.jetstream_snapshots import JetStreamSnapshots
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.state_codec import decode_actor_state, encode_actor_state
from tests.support.cluster import GIB

pytestmark = pytest.mark.anyio
CHUNK = 128 * 1024  # nats-py's chunk size
KIND = "scheduler"


@dataclass
class Bucket:
    """The log, a store of its snapshots, and a connection that may do anything to the
    bucket underneath (the tests' server has no authentication)."""

    log: JetStreamLog
    store: JetStreamSnapshots

    @property
    def stream(self) -> str:
        return subj.snapshot_stream(KIND)

    def meta_subject(self) -> str:
        return f"$O.{self.store.bucket}.M.{base64.urlsafe_b64encode(b'state').decode()}"

    async def meta(self) -> dict[str, object]:
        found = await self.log.js.get_last_msg(self.stream, self.meta_subject())
        assert found.data is not None
        meta: dict[str, object] = json.loads(found.data)
        return meta

    def chunk_subject(self, nuid: object) -> str:
        return f"$O.{self.store.bucket}.C.{nuid}"

    async def chunk_seqs(self) -> list[int]:
        subject, seqs = self.chunk_subject((await self.meta())["nuid"]), [0]
        while True:
            try:
                msg = await self.log.js.get_msg(self.stream, seqs[-1] + 1, subject, next=True)
            except NotFoundError:
                return seqs[1:]
            assert msg.seq is not None
            seqs.append(msg.seq)

    async def rewrite_chunks(self, change: Callable[[bytes], bytes]) -> None:
        """The object's chunks put back changed by ``change`` (its meta left as it is)."""
        subject = self.chunk_subject((await self.meta())["nuid"])
        chunks = []
        for seq in await self.chunk_seqs():
            msg = await self.log.js.get_msg(self.stream, seq)
            chunks.append(msg.data or b"")
        await self.log.js.purge_stream(self.stream, subject=subject)
        for chunk in [*chunks[:-1], change(chunks[-1])]:
            await self.log.js.publish(subject, chunk)


@pytest.fixture
async def bucket() -> AsyncIterator[Bucket]:
    with nats_server.nats_server() as server:
        log = await connect(server.url)
        await log.create_or_update_stream()  # makes the buckets too
        client = Client(log, SystemClock(), "alice")
        await client.create(image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB), count=2)
        yield Bucket(log, JetStreamSnapshots(log.client, KIND))
        await log.close()


async def _flip(b: Bucket) -> None:
    await b.rewrite_chunks(lambda c: bytes([c[0] ^ 1]) + c[1:])


async def _shorten(b: Bucket) -> None:
    await b.rewrite_chunks(lambda c: c[:-1])


async def _truncate(b: Bucket) -> None:
    await b.log.js.delete_msg(b.stream, (await b.chunk_seqs())[-1])


async def _purge(b: Bucket) -> None:
    await b.log.js.purge_stream(b.stream, subject=b.chunk_subject((await b.meta())["nuid"]))


async def _misname(b: Bucket) -> None:
    meta = {**(await b.meta()), "nuid": "NoChunksStandUnderThisName"}
    headers = {"Nats-Rollup": "sub"}
    await b.log.js.publish(b.meta_subject(), json.dumps(meta).encode(), headers=headers)


async def _junk(b: Bucket) -> None:
    await b.store.save(b"\x93 damaged, or never a snapshot")


DAMAGE: dict[str, tuple[Callable[[Bucket], Awaitable[None]], str]] = {
    "a chunk's bytes changed": (_flip, "do not match its digest"),
    "a chunk's byte lost": (_shorten, f"hold {3 * CHUNK + 9} bytes, its meta {3 * CHUNK + 10}"),
    "the last chunk lost": (_truncate, "its meta names 4 chunks, 3 are stored"),
    "every chunk lost": (_purge, "its meta names 4 chunks, 0 are stored"),
    "a meta naming chunks not there": (_misname, "its meta names 4 chunks, 0 are stored"),
    "bytes that are no snapshot": (_junk, "not a snapshot"),
}


@pytest.mark.parametrize("damage", DAMAGE)
async def test_a_corrupt_snapshot_is_said_as_such_and_replaced_by_a_full_replay(
    bucket: Bucket, damage: str
) -> None:
    damage_it, reason = DAMAGE[damage]
    await bucket.store.save(os.urandom(3 * CHUNK + 10))  # four chunks
    await damage_it(bucket)
    kept = Snapshots(bucket.store, writes=True)
    with capture_logs() as seen:
        state = await rebuild(bucket.log, kept, "scheduler")
    said = [e for e in seen if e["event"].startswith("snapshot.")]
    assert [(e["event"], e["log_level"]) for e in said] == [("snapshot.corrupt", "warning")]
    assert reason in said[0]["reason"]
    assert kept.started_from == 0
    full = await rebuild(bucket.log)
    assert encode_actor_state(state, "x") == encode_actor_state(full, "x")
    # The writer keeps one of its own at once, in place of the corrupt one.
    async with anyio.create_task_group() as tg:
        kept.keep(state, tg, "scheduler")
    saved = await bucket.store.load()
    assert saved is not None
    again = decode_actor_state(saved, await bucket.log.identity())
    assert again.last_seq == full.last_seq > 0


class SavedWhileRead(JetStreamSnapshots):
    """A save lands between the read of the meta and that of the chunks, once."""

    def __init__(self, b: Bucket, data: bytes) -> None:
        super().__init__(b.log.client, KIND)
        self.pending: bytes | None = data

    async def _chunks(self, what: str, meta: object) -> bytes:  # type: ignore[override]
        if self.pending is not None:
            data, self.pending = self.pending, None
            await self.save(data)
        return await super()._chunks(what, meta)  # type: ignore[arg-type]


async def test_an_object_replaced_while_it_is_read_is_read_anew_not_said_corrupt(
    bucket: Bucket,
) -> None:
    await bucket.store.save(os.urandom(2 * CHUNK))
    newer = os.urandom(3 * CHUNK)
    assert await SavedWhileRead(bucket, newer).load() == newer
