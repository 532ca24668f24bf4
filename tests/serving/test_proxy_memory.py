"""The proxy contract on the Python proxy the simulations and the actors' tests use."""

from collections.abc import AsyncIterator

import pytest

from services.testing.memory_proxy import MemoryProxy, memory_proxy
from tests.support.proxy_contract import ProxyContract


class TestMemoryProxy(ProxyContract):
    @pytest.fixture
    async def proxy(self) -> AsyncIterator[MemoryProxy]:
        async with memory_proxy() as proxy:
            yield proxy
