"""The event log on NATS JetStream: one stream, one subject per aggregate.

- Dedupe: every append carries ``Nats-Msg-Id`` = the event id, within a 2-minute window.
- Optimistic concurrency: ``Nats-Expected-Last-Subject-Sequence`` on single appends, and on
  the first message of an atomic batch (server 2.12+, ``allow_atomic``), which stores all
  of the batch or none of it.
- Replay: an ordered push consumer from a start sequence (the fastest way to read).
- Work: a durable pull consumer with explicit ``AckPolicy.ALL``, fed by one outstanding
  pull request at a time so records reach the actor as soon as they are stored, in
  micro-batches of whatever has arrived.
"""

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from events import AnyEvent, RawBatch, Record, encode, record_of
from events import subjects as subj
from services.adapters import raw_reader
from services.ports import ConcurrencyConflict, LogError, check_batch

__all__ = ["JetStreamLog", "connect"]

_WRONG_LAST_SEQUENCE = 10071
_DUPLICATE_WINDOW_NS = 120 * 1_000_000_000
# From this many messages on, a raw read parses in a child process (its start costs
# ~0.2 s; parsing in this one costs it ~3.5 us a message of GIL).
CHILD_READ_FROM = 100_000


def _stream_seq(msg: Msg) -> int:
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> (v1), or with
    # domain and account hash in front (v2, 12 tokens): the stream sequence is 4th from end.
    tokens = (msg.reply or "").split(".")
    return int(tokens[-4])


_FOREIGN = (nats.errors.Error, TimeoutError, OSError)


@contextlib.contextmanager
def _wrapped(what: str) -> Iterator[None]:
    """NATS and transport errors of the block as LogError (retryable: rebuild, try again)."""
    try:
        yield
    except LogError:
        raise
    except _FOREIGN as e:
        raise LogError(f"{what}: {type(e).__name__}: {e}") from e


def _consumer_seq(msg: Msg) -> int:
    # $JS.ACK...<delivered>.<sseq>.<cseq>.<ts>.<pending>: the consumer sequence, 3rd from end.
    return int((msg.reply or "").split(".")[-3])


def _check_ack(data: bytes) -> int:
    reply = json.loads(data)
    err = reply.get("error")
    if err:
        if err.get("err_code") == _WRONG_LAST_SEQUENCE:
            raise ConcurrencyConflict(err.get("description", "wrong last sequence"))
        raise LogError(f"JetStream refused the append: {err}")
    seq: int = reply["seq"]
    return seq


class JetStreamLog:
    """EventLog over a connected client. Create with ``await connect(url)``."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js = nc.jetstream()

    async def ensure_stream(self) -> None:
        """Create the stream if it does not exist (idempotent)."""
        config = {
            "name": subj.STREAM,
            "subjects": list(subj.STREAM_SUBJECTS),
            "storage": "file",
            "retention": "limits",
            "duplicate_window": _DUPLICATE_WINDOW_NS,
            "allow_atomic": True,
            "allow_direct": True,
            "discard": "old",
        }
        body = json.dumps(config).encode()
        reply = await self.nc.request(f"$JS.API.STREAM.CREATE.{subj.STREAM}", body, timeout=10)
        err = json.loads(reply.data).get("error")
        if err and err.get("err_code") == 10058:
            # It exists with another config, say from an older version with fewer
            # subjects: bring it up to this one, keeping its messages.
            reply = await self.nc.request(f"$JS.API.STREAM.UPDATE.{subj.STREAM}", body, timeout=10)
            err = json.loads(reply.data).get("error")
        if err:
            raise LogError(f"cannot create stream {subj.STREAM}: {err}")

    async def close(self) -> None:
        await self.nc.drain()

    # ---- appends --------------------------------------------------------------------------

    async def append(
        self,
        subject: str,
        event: AnyEvent,
        *,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        headers = {"Nats-Msg-Id": event.id}
        if expected_last_subject_seq is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_last_subject_seq)
        return await self._request(subject, encode(event), headers)

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        """Append independent events, pipelined (not atomic); return their sequences."""
        with _wrapped("append"):
            futures = [
                await self.js.publish_async(subject, encode(e), headers={"Nats-Msg-Id": e.id})
                for subject, e in items
            ]
            # Bounded: an ack lost with a broken connection must not hang the caller.
            acks = await asyncio.wait_for(asyncio.gather(*futures), timeout=10)
        return [ack.seq for ack in acks]

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        check_batch(items, expect_subject)
        if len(items) == 1 and items[0][0] == expect_subject:
            subject, event = items[0]
            return await self.append(
                subject, event, expected_last_subject_seq=expected_last_subject_seq
            )
        # Nats-Msg-Id is refused inside a batch; the expected sequence guards it instead.
        # The check names the first message's subject, so that message must be on it.
        ordered = sorted(items, key=lambda item: item[0] != expect_subject)
        batch_id = uuid.uuid4().hex
        last = len(ordered)
        for i, (subject, event) in enumerate(ordered, start=1):
            headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)}
            if i == 1:
                headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_last_subject_seq)
            if i == last:
                headers["Nats-Batch-Commit"] = "1"
                return await self._request(subject, encode(event), headers)
            if i == 1:
                # The first message is a request, so a bad batch is refused before we send more.
                with _wrapped(f"append a batch to {subject}"):
                    reply = await self.nc.request(
                        subject, encode(event), headers=headers, timeout=10
                    )
                if reply.data:
                    _check_ack(reply.data)
            else:
                await self.nc.publish(subject, encode(event), headers=headers)
        raise AssertionError("unreachable")

    async def _request(self, subject: str, payload: bytes, headers: dict[str, str]) -> int:
        try:
            reply = await self.nc.request(subject, payload, headers=headers, timeout=10)
        except nats.errors.NoRespondersError as e:
            raise LogError(f"no stream stores {subject}") from e
        except (nats.errors.TimeoutError, nats.errors.ConnectionClosedError) as e:
            raise LogError(f"append to {subject} got no answer: {e}") from e
        return _check_ack(reply.data)

    # ---- reads ----------------------------------------------------------------------------

    async def last_seq(self) -> int:
        with _wrapped("stream info"):
            info = await self.js.stream_info(subj.STREAM)
        seq: int = info.state.last_seq
        return seq

    async def read(
        self, after: int = 0, *, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        end = await self.last_seq() if until is None else until
        if end <= after:
            return
        async for batch in self._ordered(after, end):
            yield batch

    async def tail(
        self, after: int = 0, *, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        """As the port's ``tail``: a filtered ordered consumer when ``subject`` narrows it."""
        async for batch in self._ordered(after, None, subject):
            yield batch

    async def _ordered(
        self, after: int, end: int | None, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        """An ordered push consumer from ``after + 1`` up to ``end`` (None: forever)."""
        queue: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_msg(msg: Msg) -> None:
            queue.put_nowait(msg)

        with _wrapped("replay"):
            sub = await self.js.subscribe(
                subject,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                config=ConsumerConfig(opt_start_seq=after + 1),
                cb=on_msg,
                stream=subj.STREAM,
            )
        try:
            seq = after
            while end is None or seq < end:
                if end is None:
                    batch = [await queue.get()]
                else:
                    with _wrapped("replay"):
                        batch = [await asyncio.wait_for(queue.get(), timeout=30)]
                while not queue.empty() and len(batch) < 5000:
                    batch.append(queue.get_nowait())
                records = []
                for msg in batch:
                    seq = _stream_seq(msg)
                    if end is not None and seq > end:
                        break
                    records.append(record_of(seq, msg.subject, msg.data))
                yield records
        finally:
            with contextlib.suppress(nats.errors.Error, OSError):
                await sub.unsubscribe()

    async def follow(self, durable: str, after: int = 0) -> AsyncGenerator[list[Record], None]:
        with _wrapped(f"consumer {durable}"):
            await self._ensure_consumer(durable, after)
            pull = _Puller(self.nc, durable)
            await pull.start()
        delivered: int | None = None
        try:
            while True:
                with _wrapped(f"consumer {durable}"):
                    msgs = await pull.next_batch()
                records = []
                for msg in msgs:
                    # A gap in the consumer's sequence: deliveries lost with a broken
                    # connection. Acknowledging past them (AckPolicy.ALL) would skip them
                    # for good, so stop: the caller rebuilds from the log.
                    cseq = _consumer_seq(msg)
                    if delivered is not None and cseq != delivered + 1 and cseq > delivered:
                        raise LogError(f"consumer {durable} skipped {delivered + 1}-{cseq - 1}")
                    delivered = max(cseq, delivered or 0)
                    seq = _stream_seq(msg)
                    if seq > after:
                        records.append(record_of(seq, msg.subject, msg.data))
                if records:
                    yield records
                # Acknowledged only once the actor has applied the batch and asked for more.
                with _wrapped(f"ack {durable}"):
                    await msgs[-1].ack()
        finally:
            await pull.stop()

    async def _ensure_consumer(self, durable: str, after: int) -> None:
        config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.ALL,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            ack_wait=30,
            max_ack_pending=20_000,
            max_waiting=4,
            filter_subject=subj.STREAM_WILDCARD,
        )
        try:
            await self.js.consumer_info(subj.STREAM, durable)
        except nats.js.errors.NotFoundError:
            await self.js.add_consumer(subj.STREAM, config)

    async def delete_consumer(self, durable: str) -> None:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.js.delete_consumer(subj.STREAM, durable)

    async def read_raw(
        self,
        after: int = 0,
        *,
        until: int | None = None,
        batch: int = 10_000,
        child_from: int | None = None,
    ) -> AsyncGenerator[RawBatch, None]:
        """Stored messages after ``after`` up to ``until`` (default: the last now), undecoded.

        Yields RawBatch (canonical payloads), in order, at most ``batch`` messages at a time.
        The bulk path for replays (projection rebuilds): an ephemeral pull consumer without
        acks, read by ``raw_reader`` on a socket of its own; in a child process when at
        least ``child_from`` (default ``CHILD_READ_FROM``) messages are to be read, so
        that parsing them does not take the GIL from the caller's processing. Raises
        LogError if the server cannot be reached or refuses.
        """
        end = await self.last_seq() if until is None else until
        if end <= after:
            return
        url = self.nc.connected_url
        if url is None or url.hostname is None:
            raise LogError("not connected")
        src = raw_reader.Source(
            host=url.hostname,
            port=url.port or 4222,
            stream=subj.STREAM,
            consumer=f"raw-{uuid.uuid4().hex}",
            after=after,
            end=end,
            batch=batch,
            user=url.username,
            password=url.password,
        )
        if child_from is None:
            child_from = CHILD_READ_FROM
        read = raw_reader.read_in_child if end - after >= child_from else raw_reader.read_stored
        try:
            with _wrapped("raw read"):
                await self.js.add_consumer(
                    subj.STREAM,
                    ConsumerConfig(
                        name=src.consumer,
                        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                        opt_start_seq=after + 1,
                        ack_policy=AckPolicy.NONE,
                        filter_subject=subj.STREAM_WILDCARD,
                        inactive_threshold=60.0,
                        mem_storage=True,
                        num_replicas=1,
                    ),
                )
            async with aclosing(read(src)) as batches:
                async for raw in batches:
                    yield raw
        finally:
            with contextlib.suppress(nats.errors.Error, OSError):
                await self.js.delete_consumer(subj.STREAM, src.consumer)


class _Puller:
    """Keeps one pull request outstanding and hands out whatever has arrived."""

    _BATCH = 1000
    _EXPIRES_S = 10.0

    def __init__(self, nc: Client, durable: str) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{subj.STREAM}.{durable}"
        self.inbox = nc.new_inbox()
        self.queue: asyncio.Queue[Msg] = asyncio.Queue()
        self.remaining = 0
        self.sub: Any = None

    async def start(self) -> None:
        async def on_msg(msg: Msg) -> None:
            self.queue.put_nowait(msg)

        self.sub = await self.nc.subscribe(self.inbox, cb=on_msg)
        await self._request()

    async def stop(self) -> None:
        if self.sub is not None and self.nc.is_connected:
            with contextlib.suppress(nats.errors.Error, OSError):
                await self.sub.unsubscribe()

    async def _request(self) -> None:
        self.remaining = self._BATCH
        body = {"batch": self._BATCH, "expires": int(self._EXPIRES_S * 1e9)}
        await self.nc.publish(self.subject, json.dumps(body).encode(), reply=self.inbox)

    async def next_batch(self) -> list[Msg]:
        """At least one message, and every other one already here."""
        out: list[Msg] = []
        while not out:
            try:
                first = await asyncio.wait_for(self.queue.get(), timeout=self._EXPIRES_S + 5)
            except TimeoutError:
                await self._request()  # the request or its answer was lost: ask again
                continue
            pending = [first]
            while not self.queue.empty():
                pending.append(self.queue.get_nowait())
            for msg in pending:
                if msg.headers and msg.headers.get("Status"):
                    if msg.headers["Status"] != "100":  # 100 is an idle heartbeat
                        await self._request()  # 408 expired, 409 and the like: a new one
                    continue
                out.append(msg)
                self.remaining -= 1
                if self.remaining == 0:
                    await self._request()
        return out


async def connect(url: str, *, name: str = "fgpu") -> JetStreamLog:
    """Connect and make sure the stream exists. Raises LogError if the server is unreachable."""
    try:
        nc = await nats.connect(url, name=name, connect_timeout=5, max_reconnect_attempts=-1)
    except (OSError, nats.errors.NoServersError) as e:
        raise LogError(f"cannot reach NATS at {url}: {e}") from e
    log = JetStreamLog(nc)
    await log.ensure_stream()
    return log
