"""The domains' stream on JetStream (``FGPU_DOMAINS``): where the domain feed writes each
domain's records of the log (``JetStreamDomainFeed``), and the consumers through which
readers read them, or the whole log (``JetStreamReaderConsumers``, the gatekeeper's).

A record fed is the log's payload, on ``fgpu.d.<domain>.<its subject>``, with headers
``Fgpu-Seq`` (its sequence in the log) and ``Nats-Msg-Id`` ``<domain>.<sequence>`` (kept
once per domain). A reader's consumer is named by its access key and delivers to
``fgpu.out.<key>`` (which only that reader hears), acknowledged one by one; its filter is
its scope (a domain's subjects, or the whole log), set here and by nobody else.
"""

import asyncio
import base64
import contextlib
import json
from collections.abc import Sequence
from typing import Any

from events import Record, encode
from events import subjects as subj
from services.adapters.nats_client import ConsumerMissing, NatsClient, js_error
from services.ports import LogError

__all__ = ["SEQ_HEADER", "JetStreamDomainFeed", "JetStreamReaderConsumers"]

SEQ_HEADER = "Fgpu-Seq"
_TIMEOUT_S = 10.0


async def _api(client: NatsClient, what: str, endpoint: str, body: dict[str, Any]) -> Any:
    """``$JS.API.<endpoint>`` asked with ``body``; its answer. Raises LogError."""
    with client.call(what):
        reply = await client.nc.request(
            f"$JS.API.{endpoint}", json.dumps(body).encode(), timeout=_TIMEOUT_S
        )
    try:
        answer = json.loads(reply.data)
    except ValueError as e:
        raise LogError(f"{what}: an answer that is no JSON: {reply.data[:200]!r}") from e
    error = answer.get("error") if isinstance(answer, dict) else None
    if error:
        raise js_error(what, error.get("err_code"), error.get("description"))
    return answer


class JetStreamDomainFeed:
    """DomainFeed on the domains' stream, through ``client`` (the feed's connection)."""

    def __init__(self, client: NatsClient) -> None:
        self._client = client
        # One context for the feed's life: each subscribes its own inbox for the acks of
        # its first publish and never lets go of it (one per batch piled up for good).
        self._js = client.nc.jetstream()

    async def last_fed(self) -> int:
        stream = subj.DOMAINS_STREAM
        info = await _api(self._client, "the domains' stream", f"STREAM.INFO.{stream}", {})
        last = int(info["state"]["last_seq"])
        if not info["state"]["messages"]:
            return 0
        got = await _api(
            self._client, "the last record fed", f"STREAM.MSG.GET.{stream}", {"seq": last}
        )
        headers = base64.b64decode(got["message"].get("hdrs") or b"").decode()
        for line in headers.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip() == SEQ_HEADER:
                return int(value.strip())
        raise LogError(f"the domains' stream holds a message without {SEQ_HEADER} at {last}")

    async def feed(self, items: Sequence[tuple[str, Record]]) -> None:
        with self._client.call("feed the domains"):
            futures = [
                await self._js.publish_async(
                    subj.domain_feed(domain, r.subject),
                    encode(r.event),  # type: ignore[arg-type]  # fed records are events
                    headers={"Nats-Msg-Id": f"{domain}.{r.seq}", SEQ_HEADER: str(r.seq)},
                )
                for domain, r in items
            ]
            acks = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), timeout=_TIMEOUT_S
            )
        for ack in acks:
            if isinstance(ack, BaseException):
                raise LogError(f"feed the domains: {type(ack).__name__}: {ack}") from ack


class JetStreamReaderConsumers:
    """The readers' consumers, through ``client`` (the gatekeeper's static user: readers
    may not make or change one)."""

    def __init__(self, client: NatsClient) -> None:
        self._client = client

    async def open(self, access_key: str, domain: str | None) -> None:
        """The consumer of reader ``access_key`` (of ``domain``'s part of the log; None:
        all of it), made if it is not there (one there is kept as it is: its position
        is the reader's). Raises LogError."""
        stream, scope = (
            (subj.STREAM, subj.STREAM_WILDCARD)
            if domain is None
            else (subj.DOMAINS_STREAM, subj.domain_feed(domain))
        )
        config = {
            "name": access_key,
            "durable_name": access_key,
            "deliver_subject": subj.reader_out(access_key),
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 30 * 1_000_000_000,
            "max_ack_pending": 1000,
            "filter_subject": scope,
        }
        body = {"stream_name": stream, "config": config, "action": "create"}
        try:
            await _api(
                self._client,
                f"the consumer of reader {access_key}",
                f"CONSUMER.CREATE.{stream}.{access_key}.{scope}",
                body,
            )
        except LogError as e:
            if "already exists" not in str(e):  # made before: its position stays
                raise

    async def close(self, access_key: str, domain: str | None) -> None:
        """Remove the consumer of reader ``access_key``; none there is fine."""
        stream = subj.STREAM if domain is None else subj.DOMAINS_STREAM
        with contextlib.suppress(ConsumerMissing):
            await _api(
                self._client,
                f"remove the consumer of reader {access_key}",
                f"CONSUMER.DELETE.{stream}.{access_key}",
                {},
            )
