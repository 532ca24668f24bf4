"""Deliveries of JetStream consumers: the sequences their reply subjects carry, and a
consumer fed by one pull request kept outstanding.

Nothing here translates errors: its callers (``jetstream``, ``jetstream_readers``) run it
inside ``NatsClient.call``.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from events import subjects as subj
from services.ports import LogError

__all__ = ["ConsumerGone", "Puller", "ack_pending", "ack_seqs", "ack_time"]


def _ack_tokens(reply: str | None) -> tuple[list[str], int]:
    """The tokens of a delivery's reply subject, and where its sequences begin. Raises
    LogError for a form neither of these::

        $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
        $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>
            .<time>.<pending>[.<token>]
    """
    tokens = (reply or "").split(".")
    at = 5 if len(tokens) == 9 else 7 if len(tokens) in (11, 12) else 0
    if at and tokens[0] == "$JS" and tokens[1] == "ACK":
        fields = tokens[at : at + 4]
        if all(f.isascii() and f.isdigit() for f in fields):
            return tokens, at
    raise LogError(f"a delivery whose reply is of no known form: {reply!r}")


def ack_seqs(reply: str | None) -> tuple[int, int]:
    """The stream and consumer sequences in a delivery's reply subject (``_ack_tokens``).
    Raises LogError."""
    tokens, at = _ack_tokens(reply)
    return int(tokens[at]), int(tokens[at + 1])


def ack_time(reply: str | None) -> int:
    """When the server stored the delivered message: nanoseconds since the epoch, by the
    server's clock. Raises LogError."""
    tokens, at = _ack_tokens(reply)
    return int(tokens[at + 2])


def ack_pending(reply: str | None) -> int:
    """How many messages the consumer had left to deliver after this one. Raises
    LogError."""
    tokens, at = _ack_tokens(reply)
    return int(tokens[at + 3])


class ConsumerGone(LogError):
    """The consumer pulled from is no longer on the server (deleted, or its server gone)."""


class Puller:
    """Keeps one pull request outstanding on the consumer ``name`` of ``stream`` and hands
    out whatever has arrived."""

    _BATCH = 1000
    _EXPIRES_S = 10.0
    # At least twice the largest message the server takes (nats-base.conf, max_payload):
    # a request ends once the next message would not fit, so one always does.
    _MAX_BYTES = 8 << 20
    # Nobody answering a pull for this long: the consumer is gone. Less is a consumer just
    # made on a cluster, whose leader is not elected yet (its pulls meet no responders).
    _NOBODY_S = 2.0
    _ASK_AGAIN_S = 0.1

    def __init__(
        self,
        nc: Client,
        name: str,
        on_idle: Callable[[], Awaitable[None]] | None = None,
        *,
        stream: str = subj.STREAM,
    ) -> None:
        """``on_idle`` is awaited whenever a pull request expires with nothing delivered
        (every ``_EXPIRES_S`` of quiet): a check that may raise."""
        self.on_idle = on_idle
        self.nc = nc
        self.name = name
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
        self.inbox = nc.new_inbox()
        self.queue: asyncio.Queue[Msg] = asyncio.Queue()
        self.remaining = 0
        self.sub: Subscription | None = None
        self._nobody_since: float | None = None  # the first pull nobody took, since an answer

    async def start(self) -> None:
        async def on_msg(msg: Msg) -> None:
            self.queue.put_nowait(msg)

        self.sub = await self.nc.subscribe(self.inbox, cb=on_msg)
        await self._request()

    async def _request(self) -> None:
        self.remaining = self._BATCH
        body = {
            "batch": self._BATCH,
            "max_bytes": self._MAX_BYTES,
            "expires": int(self._EXPIRES_S * 1e9),
        }
        await self.nc.publish(self.subject, json.dumps(body).encode(), reply=self.inbox)

    async def next_batch(self) -> list[Msg]:
        """At least one message, and every other one already here. Raises ConsumerGone
        when the server says the consumer is no more (deleted while the request waited,
        or nobody answers for it)."""
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
                    await self._status(msg)
                    continue
                self._nobody_since = None
                out.append(msg)
                self.remaining -= 1
                if self.remaining == 0:
                    await self._request()
        return out

    async def _status(self, msg: Msg) -> None:
        """A status the server sent to the request instead of a message: 100 an idle
        heartbeat, 408 the request expired, 409 it ended otherwise (its bytes, a leader
        change), each but the first followed by a new one; 409 ``Batch Completed`` ends a
        request that delivered its whole batch, whose last message asked for the next
        already (another request then would leave two outstanding, and each of them,
        completed, two more: the server delivers ahead of the reader until it cuts it
        off as a slow consumer); 409 ``Consumer Deleted`` ends the pulls, and 503 (no
        responders: no consumer of the name, or none elected yet) once pulls have gone
        untaken for ``_NOBODY_S``."""
        assert msg.headers is not None
        status = msg.headers["Status"]
        said = msg.headers.get("Description", "")
        if status == "503":
            now = asyncio.get_running_loop().time()
            since = self._nobody_since = self._nobody_since or now
            if now - since >= self._NOBODY_S:
                raise ConsumerGone(f"consumer {self.name} is gone ({status} {said.strip()})")
            await asyncio.sleep(self._ASK_AGAIN_S)
            await self._request()
            return
        self._nobody_since = None
        if status == "409" and "consumer deleted" in said.lower():
            raise ConsumerGone(f"consumer {self.name} is gone ({status} {said.strip()})")
        if status == "409" and "batch completed" in said.lower():
            return
        if status == "408" and self.on_idle is not None:
            await self.on_idle()
        if status != "100":
            await self._request()
