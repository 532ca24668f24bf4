"""The intake on JetStream: people hand requests to the intake stream (``JetStreamSender``),
the intake reads them through its durable consumer (``JetStreamIntake``).

The stream (``jetstream_stream.intake_config``) keeps a few requests per key and refuses
more at once; the sender turns that refusal, and any other the stream answers, into
RequestsRefused (nothing taken). A message carries its first request's id as its
``Nats-Msg-Id``: handed again within the stream's dedupe window (2 minutes) it is taken
once. The window is every key's, so an id another key could know before it is stored
could be taken first and the message dropped: request ids are random or keyed with the
requester's secret (``services.domain.request_ids``), and once stored, a message dropped
as a duplicate is the same request. One handed twice beyond the window is written twice
by the intake, and the log keeps one (its dedupe on each event's id, and a batch expects
its first subject to be new). No answer (none in time, the connection lost after the
message left) is OutcomeUnknown: the caller hands the same events again.
"""

import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from functools import partial

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from events import AnyEvent, encode_many
from events import subjects as subj
from services.adapters.nats_client import JsErr, NatsClient, TimedOut, js_error
from services.ports import Handed, LogError, OutcomeUnknown, RequestsRefused

__all__ = ["INTAKE_CONSUMER", "JetStreamIntake", "JetStreamSender"]

INTAKE_CONSUMER = "intake"  # the intake's durable consumer (every intake shares it)
_BATCH = 256
_WAIT_S = 1.0  # an empty batch at least this often: the intake's timed work
_TIMEOUT_S = 10.0
_PER_SUBJECT_FULL = "maximum messages per subject exceeded"


class JetStreamSender:
    """RequestSender for ``access_key`` on ``client`` (the person's own connection)."""

    def __init__(self, client: NatsClient, access_key: str) -> None:
        self._client = client
        self.subject = subj.intake(access_key)

    async def send(self, events: Sequence[AnyEvent]) -> None:
        what = "hand requests to the intake"
        epoch = self._client.epoch
        headers = {"Nats-Msg-Id": events[0].id} if events else None
        try:
            with self._client.call(what):
                reply = await self._client.nc.request(
                    self.subject, encode_many(events), headers=headers, timeout=_TIMEOUT_S
                )
        except TimedOut as e:
            raise OutcomeUnknown(f"{what}: no answer within {_TIMEOUT_S:g} s") from e
        except LogError as e:
            if self._client.epoch != epoch:  # lost after the message may have left
                raise OutcomeUnknown(str(e)) from e
            raise  # nothing left: not connected, or nothing stores the subject
        try:
            error = json.loads(reply.data).get("error")
        except (ValueError, AttributeError) as e:
            raise LogError(f"{what}: an answer of no known form: {reply.data[:200]!r}") from e
        if not error:
            return  # taken, or taken before (a duplicate): either way once
        if _PER_SUBJECT_FULL in str(error.get("description", "")):
            raise RequestsRefused(
                f"the intake holds as many of your requests as it keeps waiting: "
                f"wait until they are through ({self.subject})"
            )
        refused = js_error(what, error.get("err_code"), error.get("description"))
        if error.get("err_code") == JsErr.STREAM_NOT_FOUND:
            raise refused
        raise RequestsRefused(str(refused)) from refused


class JetStreamIntake:
    """IntakeQueue: the intake stream through the durable consumer ``INTAKE_CONSUMER``; a
    message not let go of within ``ack_wait_s`` is handed again."""

    def __init__(self, client: NatsClient, *, ack_wait_s: float = 30.0) -> None:
        self._client = client
        self._ack_wait_s = ack_wait_s

    async def handed(self) -> AsyncGenerator[list[Handed], None]:
        js = self._client.nc.jetstream()
        config = ConsumerConfig(
            durable_name=INTAKE_CONSUMER,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=self._ack_wait_s,
            max_ack_pending=4 * _BATCH,
            filter_subject=subj.INTAKE_WILDCARD,
        )
        with self._client.call("the intake's consumer"):
            sub = await js.pull_subscribe(
                subj.INTAKE_WILDCARD,
                durable=INTAKE_CONSUMER,
                stream=subj.INTAKE_STREAM,
                config=config,
            )
        try:
            yield []  # listening: the intake is ready
            while True:
                try:
                    with self._client.call("read the intake"):
                        msgs = await sub.fetch(_BATCH, timeout=_WAIT_S)
                except TimedOut:  # nothing came
                    yield []
                    continue
                yield [Handed(_key(m), m.data, partial(self._done, m)) for m in msgs]
                # The batch's acknowledgements sent before the next is asked for (each
                # is one message on the connection: a flood is let go of at its cost).
                with self._client.call("let requests go"):
                    await self._client.nc.flush()
        finally:
            with contextlib.suppress(LogError), self._client.call("unsubscribe", connected=False):
                await sub.unsubscribe()

    async def _done(self, msg: Msg) -> None:
        with self._client.call("let a request go"):
            await msg.ack()


def _key(msg: Msg) -> str:
    """The key of ``fgpu.in.<key>``, the subject the server let its sender publish on."""
    return msg.subject.split(".", 2)[2]
