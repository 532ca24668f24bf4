"""Heartbeats and agent requests in memory: the fake of ``services.ports.bus``.

It passes the contract ``tests/support/bus_contract.py`` as the NATS adapter does: a beat sent
while a listener is in its block reaches that listener; a request reaches the one agent
serving its id and nobody else; with no agent serving, or none answering in time, the
asker gets AgentUnreachable.
"""

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from services.ports import (
    AgentHandler,
    AgentReply,
    AgentRequest,
    AgentUnreachable,
    RequestFailed,
)

__all__ = ["MemoryBus"]

_QUEUED = 10_000  # beats a slow listener may fall behind by; past that they are dropped


class MemoryBus:
    """Heartbeats and AgentRequests within one process; requests ask as ``requester``
    (``as_requester`` gives a view of the same bus that asks as another)."""

    def __init__(self, requester: str = "anonymous") -> None:
        self.requester = requester
        self._listeners: list[MemoryObjectSendStream[str]] = []
        self._servers: dict[str, AgentHandler] = {}
        self._pipes: dict[str, MemoryObjectSendStream[bytes]] = {}  # by the subject heard
        self.beats_sent = 0

    def as_requester(self, requester: str) -> "MemoryBus":
        """The same bus, asking as ``requester``."""
        view = MemoryBus(requester)
        view._listeners, view._servers = self._listeners, self._servers
        view._pipes = self._pipes
        return view

    async def beat(self, agent_id: str) -> None:
        self.beats_sent += 1
        for listener in list(self._listeners):
            # Best effort, as on NATS: a slow or gone listener misses beats.
            with contextlib.suppress(
                anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError
            ):
                listener.send_nowait(agent_id)

    @asynccontextmanager
    async def heard(self) -> AsyncIterator[AsyncIterator[str]]:
        send, receive = anyio.create_memory_object_stream[str](_QUEUED)
        self._listeners.append(send)
        try:
            async with receive:
                yield receive
        finally:
            self._listeners.remove(send)
            send.close()

    async def ask(
        self, agent_id: str, request: AgentRequest, *, timeout_s: float = 10.0
    ) -> AgentReply:
        handler = self._servers.get(agent_id)
        if handler is None:
            raise AgentUnreachable(f"no agent {agent_id} is serving requests")
        with anyio.move_on_after(timeout_s):
            try:
                return await handler(self.requester, request)
            except Exception as e:  # as the NATS side: the answer says so
                return RequestFailed(error=f"{type(e).__name__}: {e}")
        raise AgentUnreachable(f"agent {agent_id} did not answer within {timeout_s:g} s")

    @asynccontextmanager
    async def serving(self, agent_id: str, handler: AgentHandler) -> AsyncIterator[None]:
        if agent_id in self._servers:
            raise ValueError(f"agent {agent_id} is served already")
        self._servers[agent_id] = handler
        try:
            yield
        finally:
            del self._servers[agent_id]

    @asynccontextmanager
    async def pipe(self, listen: str, speak: str) -> AsyncIterator["_MemoryPipe"]:
        """One pipe hears a subject at a time (a channel's subjects are its own)."""
        if listen in self._pipes:
            raise ValueError(f"{listen} is heard already")
        send, receive = anyio.create_memory_object_stream[bytes](_QUEUED)
        self._pipes[listen] = send
        try:
            async with receive:
                yield _MemoryPipe(self._pipes, speak, receive)
        finally:
            del self._pipes[listen]
            send.close()


class _MemoryPipe:
    def __init__(
        self,
        pipes: dict[str, MemoryObjectSendStream[bytes]],
        speak: str,
        receive: MemoryObjectReceiveStream[bytes],
    ) -> None:
        self._pipes, self._speak, self._receive = pipes, speak, receive

    async def send(self, data: bytes) -> None:
        heard = self._pipes.get(self._speak)
        if heard is not None:  # nobody hears it: lost, as on NATS
            with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError):
                heard.send_nowait(data)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._receive.__aiter__()
