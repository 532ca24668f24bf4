"""One NATS connection, seen through the ports: the event log and the bus beside it."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.nats_bus import NatsBus

__all__ = ["NatsConnection", "nats_connection"]


@dataclass(frozen=True)
class NatsConnection:
    log: JetStreamLog
    bus: NatsBus


@asynccontextmanager
async def nats_connection(url: str, *, name: str = "fgpu") -> AsyncIterator[NatsConnection]:
    """Connected for the block. Raises LogError if the server cannot be reached."""
    log = await connect(url, name=name)
    try:
        yield NatsConnection(log, NatsBus(log.nc))
    finally:
        await log.close()
