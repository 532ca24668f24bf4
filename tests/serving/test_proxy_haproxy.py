"""The proxy contract on a real HAProxy, and what only HAProxy's adapter promises: changes
the runtime API can make never reload it."""

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from services.adapters.haproxy_proxy import HaproxyProxy, haproxy_proxy
from services.domain.serving.route_table import RouteTable
from tests.support.haproxy_env import require_haproxy
from tests.support.proxy_contract import ProxyContract, backend, route, sha256
from tests.support.replicas import replicas


@pytest.fixture
async def haproxy() -> AsyncIterator[HaproxyProxy]:
    require_haproxy()
    async with haproxy_proxy() as proxy:
        yield proxy


class TestHaproxy(ProxyContract):
    @pytest.fixture
    def proxy(self, haproxy: HaproxyProxy) -> HaproxyProxy:
        return haproxy


@pytest.mark.anyio
async def test_replicas_weights_and_tokens_change_without_a_reload(haproxy: HaproxyProxy) -> None:
    host, port = haproxy.address
    with replicas("a", "b", "c", "d", "e") as (a, b, c, d, e):
        first = route("r", backend(a), public=False, token_sha256=frozenset({sha256("k")}))
        await haproxy.apply(RouteTable(routes=(first,)))
        assert haproxy.reloads == 1  # the route is new: its backend is written
        changes = [
            (backend(a, 0), backend(b)),  # a drained, b added
            (backend(b), backend(c), backend(d)),  # a gone, c and d added
            (backend(e),),  # every slot given to another
        ]
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
            for backends in changes:
                r = msgspec.structs.replace(
                    first, backends=backends, token_sha256=frozenset({sha256("k2")})
                )
                await haproxy.apply(RouteTable(routes=(r,)))
                got = await client.get("/e/r/who", headers={"Authorization": "Bearer k2"})
                assert got.json()["name"] in {
                    x.session_id.removeprefix("s-") for x in backends if x.weight
                }
        assert haproxy.reloads == 1
        five = msgspec.structs.replace(first, backends=tuple(backend(x) for x in (a, b, c, d, e)))
        await haproxy.apply(RouteTable(routes=(five,)))
        assert haproxy.reloads == 2  # four slots were full: eight now
