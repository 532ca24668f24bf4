"""The proxy contract on the Python proxy the simulations and the actors' tests use."""

import socket
import struct
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from services.domain.serving.route_table import RouteTable
from services.testing.memory_proxy import MemoryProxy, memory_proxy
from tests.support.proxy_contract import ProxyContract, backend, route
from tests.support.replicas import replicas


class TestMemoryProxy(ProxyContract):
    @pytest.fixture
    async def proxy(self) -> AsyncIterator[MemoryProxy]:
        async with memory_proxy() as proxy:
            yield proxy


@pytest.mark.anyio
async def test_a_client_that_resets_mid_request_takes_only_itself_down() -> None:
    """A reset while its head is read ends that client's handling alone: the proxy (one
    listener for every client) answers the next request."""
    async with memory_proxy() as proxy:
        with replicas("a") as (a,):
            await proxy.apply(RouteTable(routes=(route("a", backend(a)),)))
            for _ in range(3):
                sock = socket.create_connection(proxy.address)
                sock.sendall(b"GET /e/a/who HTTP/1.1\r\nHost: x\r\n")  # no end of head
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # a reset, not a close
                await anyio.sleep(0.05)
            host, port = proxy.address
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
                assert (await client.get("/e/a/who")).json()["name"] == "a"
