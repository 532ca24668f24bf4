"""The bus contract on MemoryBus and on NATS."""

from collections.abc import AsyncIterator

import pytest

from services.adapters.nats_bus import NatsBus
from services.adapters.nats_connection import nats_connection
from services.testing import MemoryBus
from tests.bus_contract import BusContract


class TestMemoryBus(BusContract):
    @pytest.fixture
    def bus(self) -> MemoryBus:
        return MemoryBus()


class TestNatsBus(BusContract):
    @pytest.fixture
    async def bus(self, nats_url: str) -> AsyncIterator[NatsBus]:
        async with nats_connection(nats_url) as conn:
            yield conn.bus
