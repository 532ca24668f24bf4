"""Heartbeats and agent requests on core NATS (``services.ports.bus``), not on the log.

A beat is a message on ``fgpu.hb.<agent>``, a request a NATS request on
``fgpu.rpc.<agent>.<requester>`` whose payload is the tagged request as JSON: the
requester is the access key the connection speaks as, which the server lets a user
publish with only its own, so the agent is told truly who asked.

Every call into nats-py runs inside ``NatsClient.call``, the one place where the
client's errors are translated (``nats_client``); what it raises is then the bus port's::

    beat                                    a LogError is logged, the beat dropped
    ask: NoResponders                    -> AgentUnreachable (no agent serves the id)
         TimedOut                        -> AgentUnreachable (no answer within timeout_s)
         any other LogError              -> AgentUnreachable (no connection, or lost)
         an answer of no known form      -> AgentUnreachable
    heard, serving: entered with no connection -> AgentUnreachable
    an answer that cannot be sent           dropped (the asker is gone, or the connection)

As the log's calls, none waits on a reconnection: one that starts while the connection is
away fails at once, a request in flight when it drops fails then. A listener or a server
already in its block stays there: the client subscribes again once reconnected.
"""

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from events import subjects as subj
from services.adapters.nats_client import NatsClient, NoResponders, TimedOut
from services.ports import (
    AgentHandler,
    AgentReply,
    AgentRequest,
    AgentUnreachable,
    LogError,
    RequestFailed,
)

__all__ = ["ANONYMOUS", "NatsBus"]

ANONYMOUS = "anonymous"  # who asks over a connection that gave no access key
_IN_FLIGHT = 64  # requests an agent answers at once; more wait their turn
_PIPE_QUEUED_BYTES = 8 << 20  # a channel's bytes heard and not yet read, at most


def _log() -> Any:
    import structlog  # on first use: a CLI that only asks an agent never logs

    return structlog.get_logger()


_requests = msgspec.json.Decoder(AgentRequest)
_replies = msgspec.json.Decoder(AgentReply)
_encode = msgspec.json.Encoder().encode


@contextlib.contextmanager
def _asking(agent_id: str, timeout_s: float) -> Iterator[None]:
    """The block's LogError (a request to ``agent_id``) as AgentUnreachable, saying why."""
    try:
        yield
    except NoResponders as e:
        raise AgentUnreachable(f"no agent {agent_id} is serving requests") from e
    except TimedOut as e:
        raise AgentUnreachable(f"agent {agent_id} did not answer within {timeout_s:g} s") from e
    except LogError as e:
        raise AgentUnreachable(str(e)) from e


class NatsBus:
    """Heartbeats and AgentRequests over a connected client (the log's, usually), asking
    as ``requester``."""

    def __init__(self, client: NatsClient, requester: str = ANONYMOUS) -> None:
        self._client = client
        self._nc = client.nc
        self.requester = requester

    async def beat(self, agent_id: str) -> None:
        try:
            with self._client.call(f"heartbeat of {agent_id}"):
                await self._nc.publish(subj.heartbeat(agent_id), b"")
        except LogError as e:  # best effort: the next beat comes in seconds
            _log().warning("heartbeat.lost", agent=agent_id, error=str(e))

    @contextlib.asynccontextmanager
    async def heard(self) -> AsyncIterator[AsyncIterator[str]]:
        queue: asyncio.Queue[str] = asyncio.Queue()

        async def on_beat(msg: Msg) -> None:
            queue.put_nowait(msg.subject.rsplit(".", 1)[-1])

        sub = await self._subscribe("listen for heartbeats", subj.HEARTBEAT_WILDCARD, on_beat)
        try:
            yield _drain(queue)
        finally:
            await self._unsubscribe(sub)

    async def ask(
        self, agent_id: str, request: AgentRequest, *, timeout_s: float = 10.0
    ) -> AgentReply:
        with _asking(agent_id, timeout_s), self._client.call(f"ask {agent_id}"):
            subject = subj.agent_request(agent_id, self.requester)
            reply = await self._nc.request(subject, _encode(request), timeout=timeout_s)
        try:
            answer: AgentReply = _replies.decode(reply.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise AgentUnreachable(f"agent {agent_id} answered in a form unknown here: {e}") from e
        return answer

    @contextlib.asynccontextmanager
    async def serving(self, agent_id: str, handler: AgentHandler) -> AsyncIterator[None]:
        """Each request is answered in a task of its own (the client hands a subscription's
        messages over one at a time: a command that runs for minutes must hold up no
        other), at most ``_IN_FLIGHT`` at once; those still running when the block ends
        are cancelled, unanswered."""
        limiter = anyio.CapacityLimiter(_IN_FLIGHT)

        async def respond(msg: Msg) -> None:
            async with limiter:
                answer = await _answer(agent_id, handler, msg.subject, msg.data)
            # The asker gone, or the connection: nobody to tell.
            with contextlib.suppress(LogError), self._client.call(f"answer for {agent_id}"):
                await msg.respond(_encode(answer))

        # The client's callback only hands each message over; a task of the group answers.
        # (The stream is made before the subscription and closed with the block.)
        send, received = anyio.create_memory_object_stream[Msg](math.inf)

        async def on_request(msg: Msg) -> None:
            with contextlib.suppress(anyio.ClosedResourceError):  # the block has ended
                send.send_nowait(msg)

        async def dispatch(tg: TaskGroup) -> None:
            async for msg in received:
                tg.start_soon(respond, msg)

        with send, received:
            sub = await self._subscribe(
                f"serve requests to {agent_id}", f"{subj.agent_rpc(agent_id)}.*", on_request
            )
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(dispatch, tg)
                    yield
                    tg.cancel_scope.cancel()
            finally:
                await self._unsubscribe(sub)

    @contextlib.asynccontextmanager
    async def pipe(self, listen: str, speak: str) -> AsyncIterator["_NatsPipe"]:
        """Messages on ``listen`` queued as they come, sent on ``speak``. The relay above
        keeps a cooperating sender within its window; one that sends past
        ``_PIPE_QUEUED_BYTES`` not yet read has its pipe closed (what was queued is still
        read), rather than this process's memory filled."""
        send, received = anyio.create_memory_object_stream[bytes](math.inf)
        pipe = _NatsPipe(self._client, speak, received)

        async def on_message(msg: Msg) -> None:
            if msg.subject != listen:
                # A stored record a JetStream consumer delivers here (one whose deliver
                # subject its maker pointed at this pipe) keeps its own subject: it is
                # nobody's bytes for this channel.
                return
            pipe.queued += len(msg.data)
            if pipe.queued > _PIPE_QUEUED_BYTES:
                send.close()
            with contextlib.suppress(anyio.ClosedResourceError):  # ended, or overflowed
                send.send_nowait(msg.data)

        with send, received:
            sub = await self._subscribe(f"listen on {listen}", listen, on_message)
            try:
                yield pipe
            finally:
                await self._unsubscribe(sub)

    async def _subscribe(
        self, what: str, subject: str, cb: Callable[[Msg], Awaitable[None]]
    ) -> Subscription:
        """Subscribe ``cb`` to ``subject``. Raises AgentUnreachable."""
        try:
            with self._client.call(what):
                return await self._nc.subscribe(subject, cb=cb)
        except LogError as e:
            raise AgentUnreachable(str(e)) from e

    async def _unsubscribe(self, sub: Subscription) -> None:
        """Drop ``sub`` even as the block is cancelled; never raises."""
        with anyio.CancelScope(shield=True):
            await self._client.unsubscribe(sub)


class _NatsPipe:
    """A Pipe: publishes on ``speak``, yields what the subscription queued (``queued``
    bytes of it not yet read)."""

    def __init__(
        self, client: NatsClient, speak: str, received: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self._client, self._speak, self._received = client, speak, received
        self.queued = 0

    async def send(self, data: bytes) -> None:
        try:
            with self._client.call(f"send on {self._speak}"):
                await self._client.nc.publish(self._speak, data)
        except LogError as e:
            raise AgentUnreachable(str(e)) from e

    def __aiter__(self) -> "_NatsPipe":
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await self._received.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        self.queued -= len(data)
        return data


async def _answer(agent_id: str, handler: AgentHandler, subject: str, data: bytes) -> AgentReply:
    """``handler``'s answer to the request ``data`` on ``subject`` (whose last token is the
    asker's access key); a request that cannot be read, or a handler that fails, is
    answered RequestFailed, and the agent goes on serving."""
    try:
        request = _requests.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return RequestFailed(error=f"a request of a form unknown here: {e}")
    try:
        return await handler(subject.rsplit(".", 1)[-1], request)
    except Exception as e:  # the answer says so
        _log().exception("agent.request_failed", agent=agent_id)
        return RequestFailed(error=f"{type(e).__name__}: {e}")


async def _drain(queue: asyncio.Queue[str]) -> AsyncIterator[str]:
    while True:
        yield await queue.get()
