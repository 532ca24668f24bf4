"""Actor snapshots in JetStream object stores: one bucket per kind of actor, one object.

- The buckets are an administrator's, like the log's stream: ``ensure_buckets`` makes them
  (``JetStreamLog.create_or_update_stream`` calls it); a service only reads and writes.
- A save puts the object anew: nats-py writes the new chunks, then the meta message (a
  rollup, so the bucket's meta holds only the latest), then purges the old chunks. A
  reader sees the old object or the new one, never a mix.
- A load reads the meta message, then each chunk, by message gets (the next message on
  the object's chunk subject after the one before), which answer at once: a chunk or
  none. It never waits for a chunk that is not coming. A chunk missing means either a
  save replaced the object while it was read (the meta names another one then: it reads
  that) or the object is damaged (the meta is the same: SnapshotCorrupt, at once). The
  chunks are then checked against the meta's count, size and SHA-256 digest.
- Who may write which bucket is the server's to enforce (``services.domain.access.permissions``):
  a scheduler writes the scheduler's, which agents may only read (its info and message
  gets).

Every call into nats-py goes through ``NatsClient.call`` (``jetstream_api``): only
LogError comes out.
"""

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import BadObjectMetaError, NotFoundError
from nats.js.object_store import OBJ_CHUNKS_PRE_TEMPLATE, OBJ_DIGEST_TYPE

from events import subjects as subj
from services.adapters import jetstream_api
from services.adapters.nats_client import MessageMissing, NatsClient
from services.ports import LogError, SnapshotCorrupt, StreamMissing

__all__ = ["JetStreamSnapshots", "ensure_buckets"]

log = structlog.get_logger()

_OBJECT = "state"
_TRIES = 3  # reads of an object replaced by a save while read, before giving up
_NAMED = ("name", "bucket", "nuid")  # what every object's meta names (nats-py's ObjectInfo)


@dataclass(frozen=True)
class _Meta:
    """What an object's meta message says of it."""

    nuid: str | None  # its chunks' subject token; None for a link or none
    size: int
    chunks: int
    digest: bytes | None  # the SHA-256 of its bytes; None when the meta gives none
    saved_at: datetime


class _ChunkMissing(Exception):
    """A chunk the meta names is not in the bucket (replaced, or lost)."""


class JetStreamSnapshots:
    """SnapshotStore on the object store bucket of ``kind`` (one of SNAPSHOT_KINDS)."""

    def __init__(self, client: NatsClient, kind: str) -> None:
        if kind not in subj.SNAPSHOT_KINDS:
            raise ValueError(f"no snapshot bucket for {kind!r}")
        self._client = client
        self._js = client.nc.jetstream()
        self.kind = kind
        self.bucket = subj.snapshot_bucket(kind)
        self._stream = subj.snapshot_stream(kind)

    async def load(self) -> bytes | None:
        what = f"load a snapshot from {self.bucket}"
        meta = await self._meta(what)
        for _ in range(_TRIES):
            if meta is None:
                return None
            try:
                return await self._object(what, meta)
            except _ChunkMissing as e:
                again = await self._meta(what)
                if again == meta:  # not replaced: what it names is gone
                    raise SnapshotCorrupt(f"{what}: {e}") from None
                meta = again  # a save replaced it while it was read: the new one
        raise LogError(f"{what}: replaced by a save {_TRIES} times while it was read")

    async def saved_at(self) -> datetime | None:
        meta = await self._meta(f"the time of the snapshot in {self.bucket}")
        return None if meta is None else meta.saved_at

    async def _meta(self, what: str) -> _Meta | None:
        """The object's meta; None when there is no bucket, no object, or something else
        stands where its meta should (a message aimed there by a client that could publish
        in this account: no snapshot, and the next save puts the meta back)."""
        body = json.dumps({"last_by_subj": self._meta_subject()}).encode()
        try:
            message = await self._get(what, body)
        except (StreamMissing, MessageMissing):
            return None
        try:
            return _meta_of(message)
        except ValueError as e:
            log.warning("snapshot.meta_unreadable", bucket=self.bucket, error=str(e))
            return None

    async def _object(self, what: str, meta: _Meta) -> bytes:
        """The object's bytes, checked against its meta. Raises _ChunkMissing, or
        SnapshotCorrupt when they do not match it."""
        if meta.nuid is None:
            raise SnapshotCorrupt(f"{what}: its meta names no chunks of this bucket")
        data = await self._chunks(what, meta)
        if len(data) != meta.size:
            raise SnapshotCorrupt(
                f"{what}: its chunks hold {len(data)} bytes, its meta {meta.size}"
            )
        if hashlib.sha256(data).digest() != meta.digest:
            raise SnapshotCorrupt(f"{what}: its chunks do not match its digest")
        return data

    async def _chunks(self, what: str, meta: _Meta) -> bytes:
        """The ``meta.chunks`` chunks of the object, in order, joined. Raises _ChunkMissing
        when fewer are stored."""
        subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self.bucket, obj=meta.nuid)
        data = bytearray()
        after = 0
        for n in range(meta.chunks):
            body = json.dumps({"seq": after + 1, "next_by_subj": subject}).encode()
            try:
                message = await self._get(what, body)
            except MessageMissing:
                raise _ChunkMissing(
                    f"its meta names {meta.chunks} chunks, {n} are stored"
                ) from None
            try:
                after = int(message["seq"])
                data += base64.b64decode(message.get("data") or "", validate=True)
            except (KeyError, TypeError, ValueError, binascii.Error) as e:
                raise LogError(f"{what}: a message of no known form: {e!r}") from e
        return bytes(data)

    async def _get(self, what: str, body: bytes) -> dict[str, Any]:
        """The message a message get of the bucket's stream answers. Raises LogError
        (MessageMissing for none, StreamMissing for no bucket)."""
        answer = await jetstream_api.request(
            self._client, what, f"STREAM.MSG.GET.{self._stream}", body
        )
        message = answer.get("message")
        if not isinstance(message, dict):
            raise LogError(f"{what}: an answer without a message: {str(answer)[:200]}")
        return message

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


def _meta_of(message: dict[str, Any]) -> _Meta | None:
    """What a meta message (as a message get answers it) says; None for a deleted
    object's. Raises ValueError for a message that is no object's meta."""
    try:
        info = json.loads(base64.b64decode(message.get("data") or "", validate=True))
        saved_at = datetime.fromisoformat(str(message["time"]))
    except (KeyError, ValueError, binascii.Error) as e:
        raise ValueError(f"no object's meta: {e}") from e
    if not isinstance(info, dict) or not all(isinstance(info.get(k), str) for k in _NAMED):
        raise ValueError(f"no object's meta: {str(info)[:200]}")
    if info.get("deleted"):
        return None
    size, chunks = info.get("size") or 0, info.get("chunks") or 0
    if not isinstance(size, int) or not isinstance(chunks, int) or size < 0 or chunks < 0:
        raise ValueError(f"a meta of no known form: size {size!r}, chunks {chunks!r}")
    options = info.get("options")
    link = options.get("link") if isinstance(options, dict) else None
    nuid = info["nuid"] if info["nuid"] and link is None else None
    return _Meta(nuid, size, chunks, _digest(info.get("digest")), saved_at)


def _digest(said: object) -> bytes | None:
    """The SHA-256 an object's meta gives (``SHA-256=<base64url>``), or None if it gives
    none that reads."""
    text = said.strip() if isinstance(said, str) else ""
    if text[: len(OBJ_DIGEST_TYPE)].upper() != OBJ_DIGEST_TYPE.upper():
        return None
    text = text[len(OBJ_DIGEST_TYPE) :]
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None
