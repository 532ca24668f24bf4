"""The event log on NATS JetStream: one stream, one subject per aggregate.

- The stream is an administrator's: ``create_or_update_stream`` makes it or brings it up to
  this version's configuration; ``connect`` only connects, and a client that finds no
  stream gets StreamMissing from whatever it calls.
- Dedupe: every append carries ``Nats-Msg-Id`` = the event id, within a 2-minute window,
  each message of an atomic batch too: a batch holding an id the stream has seen is
  refused whole (ConcurrencyConflict), so neither a resend nor another batch stores an
  event twice. (nats-server 2.12.0 refused the header inside a batch; later ones take it.)
- Optimistic concurrency: ``Nats-Expected-Last-Subject-Sequence`` on single appends, and on
  the first message of an atomic batch (server 2.12+, ``allow_atomic``), which stores all
  of the batch or none of it.
- Replay and tail: a pull consumer without acknowledgements from a start sequence, made
  for the read under one of the connection's own names (``jetstream_readers``);
  ``read_raw``, the bulk reader, through one too, when the connection is one it speaks
  (see ``services.ports.BulkLog``).
- Work: a durable pull consumer with explicit ``AckPolicy.ALL``, fed by one outstanding
  pull request at a time so records reach the actor as soon as they are stored, in
  micro-batches of whatever has arrived. Its name is the caller's, and a service's
  permissions name the durables of its kind (``permissions.durables``).

Every call into nats-py goes through ``NatsClient.call`` (``nats_client``), so only the
log port's errors come out of here. An append that left and got no answer (none in time,
or the connection lost meanwhile) is OutcomeUnknown: a server whose disk is full stores
nothing and answers nothing, and one that stored it may have lost the answer.
"""

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager, suppress
from functools import partial
from typing import Any, TypeVar, Unpack
from urllib.parse import ParseResult

import anyio
import nats.errors
import nats.js.errors
import structlog
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy

from events import AnyEvent, RawBatch, Record, encode, record_of
from events import subjects as subj
from services.adapters import jetstream_api, raw_reader
from services.adapters.jetstream_api import ASK_AGAIN_S, TIMEOUT_S
from services.adapters.jetstream_pull import Puller, ack_seqs
from services.adapters.jetstream_readers import deliveries, read_consumer
from services.adapters.jetstream_snapshots import ensure_buckets
from services.adapters.jetstream_stream import (
    StreamChange,
    StreamInfo,
    domains_config,
    holds,
    intake_config,
    retention_of,
    retention_step,
    stream_config,
    stream_info_of,
    updated,
)
from services.adapters.nats_client import (
    ConnectOptions,
    ConsumerMissing,
    Credentials,
    NatsClient,
    NoResponders,
    TimedOut,
    open_client,
)
from services.ports import (
    BulkReadUnavailable,
    ConcurrencyConflict,
    LogError,
    OutcomeUnknown,
    Retention,
    StreamMissing,
    check_batch,
)

__all__ = ["JetStreamLog", "StreamChange", "StreamInfo", "connect"]

log = structlog.get_logger()
_T = TypeVar("_T")
RESEND_S = 1.0  # an append not answered by then is sent again (see _answered)
# Nobody took it: nats-py's words for a request and for an async publish.
_UNANSWERED = (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)
_REPLAY_WAIT_S = 30  # a replay's next record, at most, when it is stored
# From this many messages on, a raw read parses in a child process (its start costs more
# than parsing a short read here; parsing a long one here takes the GIL from the caller).
CHILD_READ_FROM = 100_000


def _bulk_refusal(credentials: Credentials, url: ParseResult) -> str | None:
    """What of this connection the bulk reader (plain TCP, a password or a token) does
    not speak, or None."""
    if credentials.tls or url.scheme in ("tls", "wss"):
        return "TLS, which the connection uses"
    if url.scheme == "ws":
        return "WebSocket, which the connection uses"
    if credentials.jwt:
        return "creds files (JWT), with which the connection authenticates"
    if credentials.nkey:
        return "nkeys, with which the connection authenticates"
    return None


def _reader_auth(c: Credentials, url: ParseResult) -> tuple[str | None, str | None, str | None]:
    """User, password and token for a second connection, as nats-py chooses them: the
    options first, then the URL (a user alone there is a token)."""
    if c.user is not None and c.password is not None:
        return c.user, c.password, None
    if c.token is not None:
        return None, None, c.token
    if url.username is not None and url.password is None:
        return None, None, url.username
    return url.username, url.password, None


class JetStreamLog:
    """EventLog (and BulkLog) over a connected client. Create with ``await connect(url)``."""

    def __init__(self, client: NatsClient) -> None:
        self._client = client
        self._call = client.call
        self.nc = client.nc
        self.js = client.nc.jetstream()
        self._leader_asked: asyncio.Future[bool] | None = None  # see _has_leader

    @property
    def client(self) -> NatsClient:
        """The connection under this log (the bus and the intake's sender share it)."""
        return self._client

    async def close(self) -> None:
        """Drain and close the connection; never raises."""
        await self._client.close()

    # ---- the stream (an administrator's) ---------------------------------------------------

    async def create_or_update_stream(
        self, replicas: int | None = None, retention: Retention | None = None
    ) -> StreamChange:
        """Create the stream, or bring an existing one up to this version's configuration,
        keeping its messages and what an administrator set beside it (``updated``), with
        ``replicas`` copies on a cluster (None: as it is) and ``retention`` (None: a new
        stream keeps everything for good, an existing one its own; see
        ``retention_step``); and the actors' snapshot buckets that are missing. An
        administrator's step (``fgpu stream create``; ``fgpu up`` for its embedded
        server). Raises LogError if the server refuses."""
        change = await self._stream_step(stream_config(replicas), retention)
        await self._beside_step(intake_config(replicas))
        await self._beside_step(domains_config(replicas))
        await ensure_buckets(self._client, replicas)
        return change

    async def _beside_step(self, wanted: dict[str, Any]) -> None:
        """A stream beside the log (the intake's, the domains') made, or brought up to
        ``wanted``: none holds the log's history, which stays the log's alone."""
        name = wanted["name"]
        try:
            current = await self._api(f"stream {name} info", f"STREAM.INFO.{name}")
        except StreamMissing:
            body = json.dumps(wanted).encode()
            await self._api(f"create the stream {name}", f"STREAM.CREATE.{name}", body)
            return
        config = current.get("config") or {}
        if not holds(config, wanted):
            body = json.dumps(updated(config, wanted)).encode()
            await self._api(f"update the stream {name}", f"STREAM.UPDATE.{name}", body)

    async def _stream_step(
        self, wanted: dict[str, Any], retention: Retention | None
    ) -> StreamChange:
        try:
            current = await self._api("stream info", f"STREAM.INFO.{subj.STREAM}")
        except StreamMissing:
            body = json.dumps(retention_step(None, wanted, retention)).encode()
            await self._api("create the stream", f"STREAM.CREATE.{subj.STREAM}", body)
            return StreamChange.CREATED
        config = current.get("config") or {}
        wanted = retention_step(config, wanted, retention)
        if holds(config, wanted):
            return StreamChange.CURRENT
        body = json.dumps(updated(config, wanted)).encode()
        await self._api("update the stream", f"STREAM.UPDATE.{subj.STREAM}", body)
        return StreamChange.UPDATED

    async def retention(self) -> Retention | None:
        data = await self._api("stream info", f"STREAM.INFO.{subj.STREAM}")
        return retention_of(data.get("config") or {})

    async def remove_through(self, seq: int, keep: Sequence[str]) -> None:
        """One purge per stored subject pattern but ``keep``'s, of its records below
        ``seq + 1`` (each is idempotent: a purge asked again removes nothing more)."""
        for pattern in subj.STREAM_SUBJECTS:
            if pattern in keep:
                continue
            body = json.dumps({"filter": pattern, "seq": seq + 1}).encode()
            await self._api(f"remove {pattern} through {seq}", f"STREAM.PURGE.{subj.STREAM}", body)

    async def stream_info(self) -> StreamInfo:
        """The stream's subjects, size, sequences and creation time. Raises StreamMissing
        if there is none, LogError if the server cannot say."""
        return stream_info_of(await self._api("stream info", f"STREAM.INFO.{subj.STREAM}"))

    async def _api(self, what: str, endpoint: str, body: bytes = b"") -> dict[str, Any]:
        """A request to ``$JS.API.<endpoint>``; its answer (``jetstream_api.request``).
        Raises LogError."""
        return await jetstream_api.request(self._client, what, endpoint, body)

    # ---- appends --------------------------------------------------------------------------

    async def append(
        self,
        subject: str,
        event: AnyEvent,
        *,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        what = f"append to {subject}"
        return _ack_seq(what, await self._append(what, subject, event, expected_last_subject_seq))

    async def _append(
        self, what: str, subject: str, event: AnyEvent, expected: int | None
    ) -> dict[str, Any]:
        """One event appended, deduped by its id; the acknowledgement. Raises LogError."""
        headers = {"Nats-Msg-Id": event.id}
        if expected is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
        async with self._appending(what):
            reply = await self._answered(
                partial(self.nc.request, subject, encode(event), TIMEOUT_S, headers=headers)
            )
            return jetstream_api.answer(what, reply.data)

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        """Append independent events, pipelined (not atomic); return their sequences."""

        async def send() -> list[int]:  # again whole: what an earlier one stored, ids dedupe
            futures = [
                await self.js.publish_async(s, encode(e), headers={"Nats-Msg-Id": e.id})
                for s, e in items
            ]
            # Every ack is awaited before the first failure is raised: none is left to
            # fail unobserved.
            acks = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), timeout=TIMEOUT_S
            )
            seqs = []
            for ack in acks:
                if isinstance(ack, BaseException):
                    raise ack
                seqs.append(ack.seq)
            return seqs

        async with self._appending("append many"):
            return await self._answered(send)

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        check_batch(items, expect_subject)
        what = f"append a batch to {expect_subject}"
        if len(items) == 1 and items[0][0] == expect_subject:
            subject, event = items[0]
            ack = await self._append(what, subject, event, expected_last_subject_seq)
            if ack.get("duplicate"):  # stored before: a batch's resend stores nothing
                raise ConcurrencyConflict(f"{what}: event {event.id} is on the log already")
            return _ack_seq(what, ack)
        # The check names the first message's subject, so that message must be on it.
        ordered = sorted(items, key=lambda item: item[0] != expect_subject)
        last = len(ordered)

        # One call: a connection lost anywhere in the batch fails it, and the server
        # stores none of a batch it did not see committed.
        async def send() -> int:
            batch_id = uuid.uuid4().hex  # each send its own: the server began none
            for i, (subject, event) in enumerate(ordered, start=1):
                headers = {
                    "Nats-Batch-Id": batch_id,
                    "Nats-Batch-Sequence": str(i),
                    "Nats-Msg-Id": event.id,
                }
                if i == 1:
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_last_subject_seq)
                if i == last:
                    headers["Nats-Batch-Commit"] = "1"
                    reply = await self.nc.request(
                        subject, encode(event), headers=headers, timeout=TIMEOUT_S
                    )
                    return _ack_seq(what, jetstream_api.answer(what, reply.data))
                if i == 1:
                    # A request, so that a bad batch is refused before we send more.
                    reply = await self.nc.request(
                        subject, encode(event), headers=headers, timeout=TIMEOUT_S
                    )
                    if reply.data:
                        jetstream_api.answer(what, reply.data)
                else:
                    await self.nc.publish(subject, encode(event), headers=headers)
            raise AssertionError("unreachable")

        async with self._appending(what):
            return await self._answered(send)

    @asynccontextmanager
    async def _appending(self, what: str) -> AsyncIterator[None]:
        """``call(what)`` for appends: nobody answering is StreamMissing when the stream is
        gone, else a LogError: no stream stores the subject. No answer once a message may
        have left (none in time, the connection lost during the call) is OutcomeUnknown:
        the server may have stored it (a full disk answers nothing at all)."""
        epoch = self._client.epoch
        try:
            with self._call(what):
                yield
        except NoResponders as e:
            await self.stream_info()  # raises StreamMissing if that is why
            raise LogError(f"{what}: no stream stores the subject") from e
        except TimedOut as e:
            raise OutcomeUnknown(str(e)) from e
        except LogError as e:
            # A refusal the server answered is of its own type, or came on the same
            # connection; a plain LogError across a lost connection says nothing of it.
            if self._client.epoch != epoch and type(e) is LogError:
                raise OutcomeUnknown(str(e)) from e
            raise

    async def _answered(self, send: Callable[[], Awaitable[_T]]) -> _T:
        """What ``send()`` gets, sent again while the stream elects a leader; inside
        ``_appending``, which makes the port's error of what the last send raised.

        Every append may be sent again: single appends and ``append_many`` carry their
        events' ids (the stream stores an id once, and answers a resend with the stored
        sequence), a batch expects its subject's last sequence (a resend of one stored is
        refused: ConcurrencyConflict, and the caller re-reads). So:

        - Nobody answering means no server took it: the stream has no leader (an
          election), or is gone, or stores no such subject. Its info, asked until someone
          answers (``_has_leader``), says which: it is sent again until a send is
          answered, or one after an answer naming a leader is not either.
        - A send not answered within ``RESEND_S`` (twice that the next time...) may have
          been lost with the leader it went to (a killed server answers nothing, and
          elections take seconds): the stream's info is asked, then it is sent again.

        Until ``TIMEOUT_S``: then TimeoutError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT_S
        wait = RESEND_S
        leader = False
        while True:
            try:
                with anyio.fail_after(min(wait, deadline - loop.time())):
                    return await send()
            except _UNANSWERED as e:
                if leader:
                    raise
                if loop.time() >= deadline:
                    raise TimeoutError(f"the stream had no leader for {TIMEOUT_S} s") from e
            except TimeoutError as e:
                if loop.time() >= deadline - 0.05:
                    raise TimeoutError(f"no answer within {TIMEOUT_S} s") from e
                wait *= 2
            leader = await self._has_leader()
            if not leader:
                await anyio.sleep(ASK_AGAIN_S)

    async def _has_leader(self) -> bool:
        """Whether the stream's info, asked until someone answers, names a leader. Raises
        StreamMissing, LogError. Appends waiting at once (an election stops all of a
        connection's) share one question: hundreds asking each would slow the servers
        just as they recover."""
        if self._leader_asked is not None:
            shared: bool = await asyncio.shield(self._leader_asked)
            return shared
        asked = self._leader_asked = asyncio.get_running_loop().create_future()
        asked.add_done_callback(_retrieved)
        try:
            info = await self._api("stream info", f"STREAM.INFO.{subj.STREAM}")
            asked.set_result(bool((info.get("cluster") or {}).get("leader")))
        except LogError as e:
            asked.set_exception(e)
        except BaseException:
            asked.set_exception(LogError("stream info: the asking call was cancelled"))
            raise
        finally:
            self._leader_asked = None
        leader: bool = await asked
        return leader

    # ---- reads ----------------------------------------------------------------------------

    async def last_seq(self) -> int:
        return (await self.stream_info()).last_seq

    async def count(self, subject: str) -> int:
        body = json.dumps({"subjects_filter": subject}).encode()
        data = await self._api("stream info", f"STREAM.INFO.{subj.STREAM}", body)
        try:
            return int((data["state"].get("subjects") or {}).get(subject, 0))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise LogError(f"stream info: an answer of no known form: {e!r}") from e

    async def identity(self) -> str:
        """The stream's name and creation time: a stream made anew is created later."""
        return f"{subj.STREAM}@{(await self.stream_info()).created.isoformat()}"

    async def read(
        self, after: int = 0, *, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        end = await self.last_seq() if until is None else until
        if end <= after:
            return
        async with aclosing(self._ordered(after, end)) as batches:
            async for batch in batches:
                yield batch

    async def tail(
        self, after: int = 0, *, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        """As the port's ``tail``: a consumer filtered on ``subject`` when it narrows it."""
        async with aclosing(self._ordered(after, None, subject)) as batches:
            async for batch in batches:
                yield batch

    async def _ordered(
        self, after: int, end: int | None, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        """The records on ``subject`` from ``after + 1`` up to ``end`` (None: forever), in
        order, through a consumer of this connection's made for the read; when ``end`` is
        given, each batch within ``_REPLAY_WAIT_S``."""
        what = "replay"
        wait_s = None if end is None else _REPLAY_WAIT_S
        async with (
            read_consumer(self._client, subj.STREAM, subject, after, what) as name,
            aclosing(deliveries(self._client, subj.STREAM, name, what, wait_s=wait_s)) as it,
        ):
            async for msgs in it:
                records = []
                for msg in msgs:
                    seq = ack_seqs(msg.reply)[0]
                    if end is not None and seq > end:
                        break
                    records.append(record_of(seq, msg.subject, msg.data))
                if records:
                    yield records
                if end is not None and seq >= end:
                    return

    async def follow(self, durable: str, after: int = 0) -> AsyncGenerator[list[Record], None]:
        what = f"consumer {durable}"
        epoch = self._client.epoch
        await self._ensure_consumer(durable, after)
        pull = Puller(self.nc, durable, on_idle=partial(self._check_consumer, durable))
        delivered: int | None = None
        try:
            with self._call(what, since=epoch):
                await pull.start()
            while True:
                with self._call(what, since=epoch):
                    msgs = await pull.next_batch()
                records = []
                for msg in msgs:
                    seq, cseq = ack_seqs(msg.reply)
                    # A gap in the consumer's sequence: deliveries lost with a broken
                    # connection. Acknowledging past them (AckPolicy.ALL) would skip them
                    # for good, so stop: the caller rebuilds from the log.
                    if delivered is not None and cseq != delivered + 1 and cseq > delivered:
                        raise LogError(f"consumer {durable} skipped {delivered + 1}-{cseq - 1}")
                    delivered = max(cseq, delivered or 0)
                    if seq > after:
                        records.append(record_of(seq, msg.subject, msg.data))
                if records:
                    yield records
                # Acknowledged only once the actor has applied the batch and asked for more.
                with self._call(f"ack {durable}", since=epoch):
                    await msgs[-1].ack()
        finally:
            if pull.sub is not None:
                await self._client.unsubscribe(pull.sub)

    async def _check_consumer(self, durable: str) -> None:
        """Raise LogError if ``durable`` is no longer as this reader made it (someone with
        the right to manage consumers changed its filter or acknowledgements: it would
        hand out nothing more, silently), ConsumerMissing if it is gone. The caller
        rebuilds; the next ``follow`` makes it anew."""
        info = await self._consumer_info(durable)
        changed = _consumer_changed(info.config)
        if changed is not None:
            log.error("jetstream.consumer_changed", consumer=durable, change=changed)
            raise LogError(f"consumer {durable} was changed ({changed}): it is made anew")

    async def _consumer_info(self, durable: str) -> ConsumerInfo:
        """``durable``'s info. Raises ConsumerMissing if there is none, LogError."""
        what = f"consumer {durable}"
        body = await self._api(what, f"CONSUMER.INFO.{subj.STREAM}.{durable}")
        try:
            info: ConsumerInfo = ConsumerInfo.from_response(body)
        except (TypeError, ValueError, KeyError) as e:
            raise LogError(f"{what}: an answer of no known form: {e!r}") from e
        return info

    async def _ensure_consumer(self, durable: str, after: int) -> None:
        config = ConsumerConfig(
            name=durable,
            durable_name=durable,
            ack_policy=AckPolicy.ALL,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            ack_wait=30,
            max_ack_pending=20_000,
            max_waiting=4,
            filter_subject=subj.STREAM_WILDCARD,
        )
        # Named, on ``CONSUMER.CREATE.<stream>.<name>.<filter>``: the subject a service's
        # permissions name its durables on (not ``DURABLE.CREATE``).
        create = f"CONSUMER.CREATE.{subj.STREAM}.{durable}.{subj.STREAM_WILDCARD}"
        body = json.dumps({"stream_name": subj.STREAM, "config": config.as_dict()}).encode()
        try:
            info = await self._consumer_info(durable)
        except ConsumerMissing:
            await self._api(f"create consumer {durable}", create, body)
            return
        if _consumer_changed(info.config) is not None:
            # Not as this reader made it: made anew from where the caller's state is.
            await self.delete_consumer(durable)
            await self._api(f"create consumer {durable}", create, body)

    async def delete_consumer(self, durable: str) -> None:
        """Forget the durable cursor ``durable`` (no error if there is none)."""
        with suppress(ConsumerMissing):
            await self._api(
                f"delete consumer {durable}", f"CONSUMER.DELETE.{subj.STREAM}.{durable}"
            )

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
        The bulk path for replays (projection rebuilds): a pull consumer without acks made
        for the read (``jetstream_readers``), read by ``raw_reader`` on a socket of its
        own; in a child process when at least ``child_from`` (default ``CHILD_READ_FROM``)
        messages are to be read, so that parsing them does not take the GIL from the
        caller's processing.

        Raises BulkReadUnavailable if the reader does not speak this connection (TLS, an
        nkey, a creds file) or this server (TLS required, acks of another form): read with
        ``read`` instead, after the batches already handed out. Raises LogError if the
        server cannot be reached or refuses.
        """
        url = self.nc.connected_url
        if url is None or url.hostname is None:
            raise LogError("raw read: the connection to NATS is not connected")
        refusal = _bulk_refusal(self._client.credentials, url)
        if refusal is not None:
            raise BulkReadUnavailable(f"the bulk reader does not speak {refusal}")
        end = await self.last_seq() if until is None else until
        if end <= after:
            return
        if child_from is None:
            child_from = CHILD_READ_FROM
        read = raw_reader.read_in_child if end - after >= child_from else raw_reader.read_stored
        user, password, token = _reader_auth(self._client.credentials, url)
        what = "raw read"
        async with read_consumer(
            self._client, subj.STREAM, subj.STREAM_WILDCARD, after, what
        ) as name:
            src = raw_reader.Source(
                host=url.hostname,
                port=url.port or 4222,
                stream=subj.STREAM,
                consumer=name,
                after=after,
                end=end,
                batch=batch,
                user=user,
                password=password,
                token=token,
                # The connection's own inbox: a confined identity may receive there only.
                inbox_prefix=self._client.credentials.inbox_prefix,
            )
            async with aclosing(read(src)) as batches:
                async for raw in batches:
                    yield raw


def _retrieved(future: asyncio.Future[bool]) -> None:
    """Mark ``future``'s exception seen: whoever awaits it raises it, and nobody may."""
    if not future.cancelled():
        future.exception()


def _ack_seq(what: str, ack: dict[str, Any]) -> int:
    """The sequence a publish's acknowledgement gives. Raises LogError."""
    seq = ack.get("seq")
    if not isinstance(seq, int):
        raise LogError(f"{what}: an acknowledgement without a sequence: {str(ack)[:200]}")
    return seq


def _consumer_changed(config: ConsumerConfig) -> str | None:
    """What in a durable consumer's configuration is not what ``follow`` makes, or None."""
    filters = [config.filter_subject] if config.filter_subject else []
    filters += list(config.filter_subjects or [])
    if filters and filters != [subj.STREAM_WILDCARD]:
        return f"filter {filters}"
    if config.ack_policy not in (AckPolicy.ALL, None):
        return f"ack policy {config.ack_policy}"
    return None


async def connect(
    url: str, *, name: str = "fgpu", **options: Unpack[ConnectOptions]
) -> JetStreamLog:
    """Connect, and only that: the stream is made by ``create_or_update_stream``.

    ``options`` are nats-py's (``user``, ``password``, ``token``, ``nkeys_seed`` and
    ``user_credentials`` files, ``tls``); a user and password, or a token, may be in
    ``url`` instead. Raises LogError if the server is unreachable or refuses.
    """
    return JetStreamLog(await open_client(url, name=name, **options))
