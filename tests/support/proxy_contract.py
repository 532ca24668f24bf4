"""What every proxy (``services.ports.proxy``) promises, as one test class to subclass.

A subclass provides the fixture ``proxy``: a running ``Proxy`` with an empty table. Run
against the Python ``MemoryProxy`` and the real HAProxy (``tests/serving/``). Replicas
are Python HTTP servers on loopback (``tests.support.replicas``); nothing sleeps: a test
waits for what it expects (a response, a count in ``stats``, a health) with a deadline.
"""

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from services.domain.serving.route_table import Backend, Balance, HealthCheck, Route, RouteTable
from services.ports.proxy import Proxy
from tests.support.replicas import Replica, replicas

__all__ = ["DEADLINE_S", "ProxyContract", "backend", "next_event", "route", "sha256", "until"]

DEADLINE_S = 10.0
FAST = HealthCheck(interval_s=0.1, timeout_s=0.5, healthy_after=1, unhealthy_after=1)


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def backend(replica: Replica, weight: int = 100) -> Backend:
    return Backend(
        session_id=f"s-{replica.name}", host="127.0.0.1", port=replica.port, weight=weight
    )


def route(name: str, *backends: Backend, **kw: Any) -> Route:
    fields: dict[str, Any] = {"public": True, "health": FAST} | kw
    return Route(
        endpoint_id=f"ep-{name}", name=name, path_prefix=f"/e/{name}/", backends=backends, **fields
    )


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until ``check`` holds: the proxy's state is polled, bounded by DEADLINE_S."""
    with anyio.fail_after(DEADLINE_S):
        while not await check():  # noqa: ASYNC110 (a proxy's counters have no event to await)
            await anyio.sleep(0.02)
    assert await check(), what


class ProxyContract:
    pytestmark = pytest.mark.anyio

    @pytest.fixture
    async def client(self, proxy: Proxy) -> AsyncIterator[httpx.AsyncClient]:
        host, port = proxy.address
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=DEADLINE_S) as c:
            yield c

    async def test_routes_by_prefix_and_strips_it(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("a", "b") as (a, b):
            await proxy.apply(RouteTable(routes=(route("a", backend(a)), route("b", backend(b)))))
            got = (await client.get("/e/a/predict/x?q=1")).json()
            assert (got["name"], got["path"]) == ("a", "/predict/x?q=1")
            assert (await client.get("/e/b/")).json()["path"] == "/"
            assert (await client.get("/e/c/x")).status_code == 404
            assert a.seen == ["/predict/x?q=1"] and b.seen == ["/"]
            posted = (await client.post("/e/a/echo", content=b'{"inputs": [1]}')).json()
            assert posted == {"name": "a", "body": '{"inputs": [1]}'}
            # A public route's own Authorization is the replica's business: passed on.
            mine = {"Authorization": "Bearer app-own"}
            assert (await client.get("/e/a/who", headers=mine)).json()["authorization"] == mine[
                "Authorization"
            ]

    async def test_routes_by_host(self, proxy: Proxy, client: httpx.AsyncClient) -> None:
        with replicas("h") as (h,):
            r = msgspec.structs.replace(route("h", backend(h)), host="model.example")
            await proxy.apply(RouteTable(routes=(r,)))
            got = (await client.get("/who", headers={"Host": "model.example"})).json()
            assert (got["name"], got["path"]) == ("h", "/who")

    async def test_round_robin_reaches_every_replica(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("a", "b") as (a, b):
            r = route("m", backend(a), backend(b), balance=Balance.ROUND_ROBIN)
            await proxy.apply(RouteTable(routes=(r,)))
            names = [(await client.get("/e/m/who")).json()["name"] for _ in range(4)]
            assert sorted(set(names)) == ["a", "b"]

    async def test_least_connections_avoids_a_busy_replica(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("busy", "idle") as (busy, idle):
            least = Balance.LEAST_CONNECTIONS
            r = route("l", backend(busy), backend(idle, weight=0), balance=least)
            await proxy.apply(RouteTable(routes=(r,)))
            async with client.stream("GET", "/e/l/stream?n=2") as response:
                lines = response.aiter_lines()
                assert await next_event(lines) == "data: busy 0"  # busy holds one request
                both = msgspec.structs.replace(r, backends=(backend(busy), backend(idle)))
                await proxy.apply(RouteTable(routes=(both,)))
                names = {(await client.get("/e/l/who")).json()["name"] for _ in range(3)}
                assert names == {"idle"}
                busy.release()
                assert await next_event(lines) == "data: busy 1"

    async def test_a_token_is_required_refused_and_revoked(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("p") as (p,):
            table = RouteTable(
                routes=(
                    route("p", backend(p), public=False, token_sha256=frozenset({sha256("t1")})),
                )
            )
            await proxy.apply(table)
            assert (await client.get("/e/p/who")).status_code == 401
            assert (
                await client.get("/e/p/who", headers={"Authorization": "Bearer t2"})
            ).status_code == 401
            assert (
                await client.get("/e/p/who", headers={"Authorization": "t1"})
            ).status_code == 401
            assert p.seen == []  # refused before any replica
            ok = await client.get("/e/p/who", headers={"Authorization": "Bearer t1"})
            assert ok.status_code == 200 and ok.json()["authorization"] is None
            revoked = msgspec.structs.replace(
                table.routes[0], token_sha256=frozenset({sha256("t2")})
            )
            await proxy.apply(RouteTable(routes=(revoked,)))
            assert (
                await client.get("/e/p/who", headers={"Authorization": "Bearer t1"})
            ).status_code == 401
            assert (
                await client.get("/e/p/who", headers={"Authorization": "Bearer t2"})
            ).status_code == 200

    async def test_a_token_of_another_endpoint_is_refused(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("x", "y") as (x, y):
            rx = route("x", backend(x), public=False, token_sha256=frozenset({sha256("tx")}))
            ry = route("y", backend(y), public=False, token_sha256=frozenset({sha256("ty")}))
            await proxy.apply(RouteTable(routes=(rx, ry)))
            assert (
                await client.get("/e/y/who", headers={"Authorization": "Bearer tx"})
            ).status_code == 401
            assert (
                await client.get("/e/y/who", headers={"Authorization": "Bearer ty"})
            ).status_code == 200

    async def test_nothing_in_rotation_answers_503(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("z") as (z,):
            await proxy.apply(RouteTable(routes=(route("z", backend(z, weight=0)), route("none"))))
            assert (await client.get("/e/z/who")).status_code == 503
            assert (await client.get("/e/none/who")).status_code == 503
            assert z.seen == []

    async def test_a_cold_start_waits_for_a_replica(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("c") as (c,):
            cold = route("c", cold_start_s=DEADLINE_S)
            await proxy.apply(RouteTable(routes=(cold,)))
            answers: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    answers.append(await client.get("/e/c/who"))

                tg.start_soon(ask)
                await until(lambda: _in_flight(proxy, "ep-c"), "the request waits in the proxy")
                await proxy.apply(
                    RouteTable(routes=(msgspec.structs.replace(cold, backends=(backend(c),)),))
                )
            assert answers[0].status_code == 200 and answers[0].json()["name"] == "c"

    async def test_streamed_events_arrive_one_by_one(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("s") as (s,):
            await proxy.apply(RouteTable(routes=(route("s", backend(s)),)))
            with anyio.fail_after(DEADLINE_S):
                async with client.stream("GET", "/e/s/stream?n=3") as response:
                    lines = response.aiter_lines()
                    for i in range(3):
                        assert await next_event(lines) == f"data: s {i}"
                        s.release()  # the next event leaves the replica only now

    async def test_weight_zero_drains_without_cutting_a_stream(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("old", "new") as (old, new):
            await proxy.apply(
                RouteTable(routes=(route("d", backend(old), backend(new, weight=0)),))
            )
            with anyio.fail_after(DEADLINE_S):
                async with client.stream("GET", "/e/d/stream?n=2") as response:
                    lines = response.aiter_lines()
                    assert await next_event(lines) == "data: old 0"
                    await proxy.apply(
                        RouteTable(routes=(route("d", backend(old, 0), backend(new)),))
                    )
                    names = {(await client.get("/e/d/who")).json()["name"] for _ in range(3)}
                    assert names == {"new"}
                    old.release()
                    assert await next_event(lines) == "data: old 1"

    async def test_the_same_table_twice_changes_nothing(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("a", "b") as (a, b):
            table = RouteTable(
                routes=(
                    route(
                        "t",
                        backend(a),
                        backend(b),
                        public=False,
                        token_sha256=frozenset({sha256("k")}),
                    ),
                )
            )
            await proxy.apply(table)
            auth = {"Authorization": "Bearer k"}
            async with client.stream("GET", "/e/t/stream?n=2", headers=auth) as response:
                lines = response.aiter_lines()
                first = await next_event(lines)
                before = (await proxy.stats())["ep-t"].requests_total
                await proxy.apply(table)
                await proxy.apply(msgspec.convert(msgspec.to_builtins(table), RouteTable))
                assert (await proxy.stats())["ep-t"].requests_total == before
                (a if first.startswith("data: a") else b).release()
                assert (await next_event(lines)).endswith(" 1")
            assert (await client.get("/e/t/who", headers=auth)).status_code == 200

    async def test_health_follows_the_replicas_checks(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("w", "warming") as (w, warming):
            # A replica out of rotation (weight 0: warming) is checked all the same: its
            # health is what brings it into rotation.
            both = route("w", backend(w), backend(warming, weight=0))
            await proxy.apply(RouteTable(routes=(both,)))
            await until(lambda: _healthy(proxy, "s-w", True), "healthy once its check passes")
            await until(lambda: _healthy(proxy, "s-warming", True), "checked while out of rotation")
            w.healthy = False
            await until(lambda: _healthy(proxy, "s-w", False), "unhealthy once it fails")
            health = (await proxy.health())["s-w"]
            assert health.detail  # says why
            warming.healthy = False
            await until(
                lambda: _healthy(proxy, "s-warming", False), "unhealthy out of rotation too"
            )

    async def test_stats_count_requests_by_endpoint(
        self, proxy: Proxy, client: httpx.AsyncClient
    ) -> None:
        with replicas("n") as (n,):
            await proxy.apply(RouteTable(routes=(route("n", backend(n)), route("other"))))
            for _ in range(3):
                await client.get("/e/n/who")
            await until(lambda: _total(proxy, "ep-n", 3), "three requests counted")
            assert (await proxy.stats())["ep-other"].requests_total == 0


async def _total(proxy: Proxy, endpoint_id: str, n: int) -> bool:
    return (await proxy.stats())[endpoint_id].requests_total == n


async def _in_flight(proxy: Proxy, endpoint_id: str) -> bool:
    stats = (await proxy.stats()).get(endpoint_id)
    return stats is not None and stats.in_flight >= 1


async def _healthy(proxy: Proxy, session_id: str, healthy: bool) -> bool:
    got = (await proxy.health()).get(session_id)
    return got is not None and got.healthy is healthy


async def next_event(lines: AsyncIterator[str]) -> str:
    """The next line of a stream that is not empty (an event's data)."""
    async for line in lines:
        if line:
            return line
    raise AssertionError("the stream ended")
