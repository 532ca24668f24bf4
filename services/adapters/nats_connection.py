"""One NATS connection, seen through the ports: the event log and the bus beside it."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from services.adapters.jetstream import JetStreamLog
from services.adapters.nats_bus import NatsBus
from services.adapters.nats_client import open_client

__all__ = ["NatsConnection", "nats_connection"]


@dataclass(frozen=True)
class NatsConnection:
    log: JetStreamLog
    bus: NatsBus


@asynccontextmanager
async def nats_connection(url: str, *, name: str = "fgpu") -> AsyncIterator[NatsConnection]:
    """Connected for the block: the log and the bus on one client, whose errors both
    translate in one place (``NatsClient.call``). Raises LogError if the server cannot be
    reached."""
    client = await open_client(url, name=name)
    try:
        yield NatsConnection(JetStreamLog(client), NatsBus(client))
    finally:
        await client.close()
