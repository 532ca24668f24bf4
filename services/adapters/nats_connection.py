"""One NATS connection, seen through the ports: the event log and the bus beside it."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Unpack

from services.adapters.jetstream import JetStreamLog
from services.adapters.jetstream_intake import JetStreamSender
from services.adapters.jetstream_snapshots import JetStreamSnapshots
from services.adapters.nats_bus import ANONYMOUS, NatsBus
from services.adapters.nats_client import ConnectOptions, NatsClient, open_client

__all__ = ["NatsConnection", "nats_connection"]


@dataclass(frozen=True)
class NatsConnection:
    log: JetStreamLog
    bus: NatsBus
    client: NatsClient

    def snapshots(self, kind: str) -> JetStreamSnapshots:
        """The snapshots of ``kind`` (events.subjects.SNAPSHOT_KINDS), on this connection."""
        return JetStreamSnapshots(self.client, kind)

    def sender(self, access_key: str) -> JetStreamSender | None:
        """How ``access_key`` hands requests to the intake on this connection; None on a
        server that lets anyone in (no tenancy, no intake: requests go on the log)."""
        if not self.client.authenticates():
            return None
        return JetStreamSender(self.client, access_key)


@asynccontextmanager
async def nats_connection(
    url: str, *, name: str = "fgpu", **options: Unpack[ConnectOptions]
) -> AsyncIterator[NatsConnection]:
    """Connected for the block, with nats-py's ``options`` (who it is: ``user`` and
    ``password``, ``inbox_prefix``; TLS): the log and the bus on one client, whose errors
    both translate in one place (``NatsClient.call``). Raises LogError if the server
    cannot be reached or refuses."""
    client = await open_client(url, name=name, **options)
    try:
        requester = options.get("user") or ANONYMOUS
        yield NatsConnection(JetStreamLog(client), NatsBus(client, requester), client)
    finally:
        await client.close()
