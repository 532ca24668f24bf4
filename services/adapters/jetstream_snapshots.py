"""Actor snapshots in JetStream object stores: one bucket per kind of actor, one object.

- The buckets are an administrator's, like the log's stream: ``ensure_buckets`` makes them
  (``JetStreamLog.create_or_update_stream`` calls it); a service only reads and writes.
- A save puts the object anew: nats-py writes the new chunks, then the meta message (a
  rollup, so the bucket's meta holds only the latest), then purges the old chunks. A
  reader sees the old object or the new one, never a mix; a digest checks the chunks.
  A reader whose chunks were purged under it by a save gives up after ``_READ_S`` and
  reads again, the new object then.
- A load reads the meta message (a message get), then the chunks through a consumer of
  the reader's own names (``jetstream_readers``), not nats-py's ordered consumer: its
  create names no consumer, and a permission to make it is one to change any consumer of
  the bucket.
- Who may write which bucket is the server's to enforce (``services.domain.permissions``):
  a scheduler writes the scheduler's, which agents may only read.

Every call into nats-py goes through ``NatsClient.call``: only LogError comes out.
"""

import base64
import hashlib
from contextlib import aclosing

import anyio
import structlog
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import (
    BadObjectMetaError,
    BucketNotFoundError,
    NotFoundError,
    ObjectNotFoundError,
)
from nats.js.object_store import OBJ_CHUNKS_PRE_TEMPLATE, OBJ_DIGEST_TYPE

from events import subjects as subj
from services.adapters.jetstream_pull import ack_pending
from services.adapters.jetstream_readers import deliveries, read_consumer
from services.adapters.nats_client import NatsClient
from services.ports import LogError

__all__ = ["JetStreamSnapshots", "ensure_buckets"]

log = structlog.get_logger()

_OBJECT = "state"
_READ_S = 5.0  # one read of a snapshot (a few MB on a loopback: well under a second)
_TRIES = 3


class JetStreamSnapshots:
    """SnapshotStore on the object store bucket of ``kind`` (one of SNAPSHOT_KINDS)."""

    def __init__(self, client: NatsClient, kind: str) -> None:
        if kind not in subj.SNAPSHOT_KINDS:
            raise ValueError(f"no snapshot bucket for {kind!r}")
        self._client = client
        self._js = client.nc.jetstream()
        self.kind = kind
        self.bucket = subj.snapshot_bucket(kind)

    async def load(self) -> bytes | None:
        for _ in range(_TRIES - 1):
            try:
                with anyio.fail_after(_READ_S):
                    return await self._load()
            except (TimeoutError, LogError) as e:
                log.info("snapshot.read_again", bucket=self.bucket, error=str(e) or "timed out")
        try:
            with anyio.fail_after(_READ_S):
                return await self._load()
        except TimeoutError as e:
            raise LogError(f"load a snapshot from {self.bucket}: timed out") from e

    async def _load(self) -> bytes | None:
        what = f"load a snapshot from {self.bucket}"
        with self._client.call(what):
            try:
                store = await self._js.object_store(self.bucket)
                info = await store.get_info(_OBJECT)
            except (BucketNotFoundError, ObjectNotFoundError):
                return None
            except BadObjectMetaError:
                # Something else stands where the object's meta should (a message aimed
                # there by a client that could publish in this account): no snapshot,
                # and the next save puts the meta back.
                log.warning("snapshot.meta_unreadable", bucket=self.bucket)
                return None
        if info.is_link() or not info.nuid:
            raise LogError(f"{what}: the object's meta names no chunks of this bucket")
        if not info.size:
            return b""
        data = await self._chunks(what, info.nuid)
        if hashlib.sha256(data).digest() != _digest(info.digest):
            raise LogError(f"{what}: its chunks do not match its digest")
        return data

    async def _chunks(self, what: str, nuid: str) -> bytes:
        """Every chunk of the object ``nuid``, in order, joined."""
        stream = subj.snapshot_stream(self.kind)
        chunks = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self.bucket, obj=nuid)
        data = bytearray()
        async with (
            read_consumer(self._client, stream, chunks, 0, what) as name,
            aclosing(deliveries(self._client, stream, name, what)) as batches,
        ):
            async for msgs in batches:
                for msg in msgs:
                    data += msg.data
                if ack_pending(msgs[-1].reply) == 0:
                    break
        return bytes(data)

    async def save(self, data: bytes) -> None:
        with self._client.call(f"save a snapshot in {self.bucket}"):
            store = await self._js.object_store(self.bucket)
            try:
                await store.put(_OBJECT, data)
            except BadObjectMetaError:
                # The meta's subject holds no meta: it is cleared (the writer may purge
                # its own bucket), and the object put anew.
                log.warning("snapshot.meta_replaced", bucket=self.bucket)
                await self._js.purge_stream(
                    subj.snapshot_stream(self.kind), subject=self._meta_subject()
                )
                await store.put(_OBJECT, data)

    def _meta_subject(self) -> str:
        name = base64.urlsafe_b64encode(_OBJECT.encode()).decode()
        return f"$O.{self.bucket}.M.{name}"


async def ensure_buckets(client: NatsClient, replicas: int | None = None) -> list[str]:
    """Make the snapshot buckets that do not exist yet; the names of those made. An
    administrator's step, with the log's replicas (None: one)."""
    js = client.nc.jetstream()
    made = []
    for kind in subj.SNAPSHOT_KINDS:
        bucket = subj.snapshot_bucket(kind)
        with client.call(f"make the snapshot bucket {bucket}"):
            try:
                await js.stream_info(subj.snapshot_stream(kind))
                continue
            except NotFoundError:
                pass
            config = ObjectStoreConfig(
                description=f"the latest snapshot of fgpu's {kind}",
                storage=StorageType.FILE,
                replicas=replicas or 1,
            )
            await js.create_object_store(bucket, config=config)
            made.append(bucket)
    return made


def _digest(said: str | None) -> bytes | None:
    """The SHA-256 an object's meta gives (``SHA-256=<base64url>``), or None if it gives
    none that reads."""
    text = (said or "").strip()
    if text[: len(OBJ_DIGEST_TYPE)].upper() != OBJ_DIGEST_TYPE.upper():
        return None
    text = text[len(OBJ_DIGEST_TYPE) :]
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None
