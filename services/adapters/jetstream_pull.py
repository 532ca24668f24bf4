"""Deliveries of JetStream consumers: the sequences their reply subjects carry, and a
durable consumer fed by one pull request kept outstanding.

Nothing here translates errors: its callers in ``jetstream`` run it inside
``NatsClient.call``.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import suppress

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from events import subjects as subj
from services.ports import LogError

__all__ = ["Puller", "ack_seqs"]


def ack_seqs(reply: str | None) -> tuple[int, int]:
    """The stream and consumer sequences in a delivery's reply subject. Raises LogError
    for a form neither of these::

        $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
        $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>
            .<time>.<pending>[.<token>]
    """
    tokens = (reply or "").split(".")
    at = 5 if len(tokens) == 9 else 7 if len(tokens) in (11, 12) else 0
    if at and tokens[0] == "$JS" and tokens[1] == "ACK":
        with suppress(ValueError):
            return int(tokens[at]), int(tokens[at + 1])
    raise LogError(f"a delivery whose reply is of no known form: {reply!r}")


class Puller:
    """Keeps one pull request outstanding and hands out whatever has arrived."""

    _BATCH = 1000
    _EXPIRES_S = 10.0

    def __init__(
        self,
        nc: Client,
        durable: str,
        on_idle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``on_idle`` is awaited whenever a pull request expires with nothing delivered
        (every ``_EXPIRES_S`` of quiet): a check that may raise."""
        self.on_idle = on_idle
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{subj.STREAM}.{durable}"
        self.inbox = nc.new_inbox()
        self.queue: asyncio.Queue[Msg] = asyncio.Queue()
        self.remaining = 0
        self.sub: Subscription | None = None

    async def start(self) -> None:
        async def on_msg(msg: Msg) -> None:
            self.queue.put_nowait(msg)

        self.sub = await self.nc.subscribe(self.inbox, cb=on_msg)
        await self._request()

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
                    status = msg.headers["Status"]
                    if status == "408" and self.on_idle is not None:
                        await self.on_idle()
                    if status != "100":  # 100 is an idle heartbeat
                        await self._request()  # 408 expired, 409 and the like: a new one
                    continue
                out.append(msg)
                self.remaining -= 1
                if self.remaining == 0:
                    await self._request()
        return out
