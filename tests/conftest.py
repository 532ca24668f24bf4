"""Shared fixtures: a real NATS server per test session, a fresh stream per test."""

from collections.abc import AsyncIterator, Iterator

import pytest

from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    """One real nats-server -js on a free loopback port for the whole run."""
    with nats_server.nats_server() as server:
        yield server.url


@pytest.fixture
async def log(nats_url: str) -> AsyncIterator[JetStreamLog]:
    """A connection to an empty stream (deleted and created again for each test)."""
    events = await connect(nats_url)
    try:
        await events.js.delete_stream("FGPU")
    finally:
        await events.ensure_stream()
    yield events
    await events.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
