"""Heartbeats and agent requests on core NATS (``services.ports.bus``), not on the log.

A beat is a message on ``fgpu.hb.<agent>``, a request a NATS request on
``fgpu.rpc.<agent>`` whose payload is the tagged request as JSON. Every error of the
client comes out as the port's: a lost beat is dropped (the next comes in seconds), a
request that meets no agent, no answer or a broken connection is AgentUnreachable.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from events import subjects as subj
from services.ports import (
    AgentHandler,
    AgentReply,
    AgentRequest,
    AgentUnreachable,
    RequestFailed,
)

__all__ = ["NatsBus"]


def _log() -> Any:
    import structlog  # on first use: a CLI that only asks an agent never logs

    return structlog.get_logger()


_FOREIGN = (nats.errors.Error, TimeoutError, OSError)
ANONYMOUS = "anonymous"  # who asks over a connection that gave no access key
_requests = msgspec.json.Decoder(AgentRequest)
_replies = msgspec.json.Decoder(AgentReply)
_encode = msgspec.json.Encoder().encode


class NatsBus:
    """Heartbeats and AgentRequests over a connected client that speaks as ``requester``
    (its access key): a request goes out on ``fgpu.rpc.<agent>.<requester>``, where the
    server lets a user publish with its own key only."""

    def __init__(self, nc: Client, requester: str = ANONYMOUS) -> None:
        self._nc = nc
        self.requester = requester

    async def beat(self, agent_id: str) -> None:
        try:
            await self._nc.publish(subj.heartbeat(agent_id), b"")
        except _FOREIGN as e:
            _log().warning("heartbeat.lost", agent=agent_id, error=str(e))

    @contextlib.asynccontextmanager
    async def heard(self) -> AsyncIterator[AsyncIterator[str]]:
        queue: asyncio.Queue[str] = asyncio.Queue()

        async def on_beat(msg: Msg) -> None:
            queue.put_nowait(msg.subject.rsplit(".", 1)[-1])

        sub = await self._subscribe(subj.HEARTBEAT_WILDCARD, on_beat)
        try:
            yield _drain(queue)
        finally:
            await _unsubscribe(sub)

    async def ask(
        self, agent_id: str, request: AgentRequest, *, timeout_s: float = 10.0
    ) -> AgentReply:
        try:
            subject = subj.agent_request(agent_id, self.requester)
            reply = await self._nc.request(subject, _encode(request), timeout=timeout_s)
        except nats.errors.NoRespondersError as e:
            raise AgentUnreachable(f"no agent {agent_id} is serving requests") from e
        except nats.errors.TimeoutError as e:
            raise AgentUnreachable(f"agent {agent_id} did not answer within {timeout_s:g} s") from e
        except _FOREIGN as e:
            raise AgentUnreachable(f"asking agent {agent_id}: {type(e).__name__}: {e}") from e
        try:
            answer: AgentReply = _replies.decode(reply.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise AgentUnreachable(f"agent {agent_id} answered in a form unknown here: {e}") from e
        return answer

    @contextlib.asynccontextmanager
    async def serving(self, agent_id: str, handler: AgentHandler) -> AsyncIterator[None]:
        async def on_request(msg: Msg) -> None:
            answer: AgentReply
            try:
                request = _requests.decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                answer = RequestFailed(error=f"a request of a form unknown here: {e}")
            else:
                try:
                    answer = await handler(msg.subject.rsplit(".", 1)[-1], request)
                except Exception as e:  # the answer says so; the agent goes on serving
                    _log().exception("agent.request_failed", agent=agent_id)
                    answer = RequestFailed(error=f"{type(e).__name__}: {e}")
            with contextlib.suppress(*_FOREIGN):  # the asker gone: nobody to tell
                await msg.respond(_encode(answer))

        sub = await self._subscribe(f"{subj.agent_rpc(agent_id)}.*", on_request)
        try:
            yield
        finally:
            await _unsubscribe(sub)

    async def _subscribe(self, subject: str, cb: Callable[[Msg], Awaitable[None]]) -> Subscription:
        try:
            return await self._nc.subscribe(subject, cb=cb)
        except _FOREIGN as e:
            raise AgentUnreachable(f"cannot subscribe to {subject}: {e}") from e


async def _drain(queue: asyncio.Queue[str]) -> AsyncIterator[str]:
    while True:
        yield await queue.get()


async def _unsubscribe(sub: Subscription) -> None:
    with anyio.CancelScope(shield=True), contextlib.suppress(*_FOREIGN):
        await sub.unsubscribe()
