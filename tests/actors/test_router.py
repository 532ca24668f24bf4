"""The router: every proxy brought to the newest table (retried, never blocked by another),
and replicas' health told only when it changes."""

from collections.abc import Callable, Mapping

import anyio
import pytest

from services.actors.router import Router, TableFeed
from services.domain.serving.route_table import Backend, HealthCheck, Route, RouteTable
from services.ports.proxy import BackendHealth, ProxyUnavailable, RouteStats
from services.testing.memory_proxy import memory_proxy
from tests.support.proxy_contract import DEADLINE_S, backend, route
from tests.support.replicas import replicas

pytestmark = pytest.mark.anyio


class ScriptedProxy:
    """A Proxy whose failures and health the test sets; it serves nothing."""

    def __init__(self, fail_applies: int = 0) -> None:
        self.fail_applies = fail_applies
        self.applied: list[RouteTable] = []
        self.healthy: dict[str, bool] = {}
        self.health_down = False
        self.health_calls = 0
        self.attempts = 0
        self.changed = anyio.Event()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", 0)

    async def apply(self, table: RouteTable) -> None:
        self.attempts += 1
        if self.fail_applies:
            self.fail_applies -= 1
            self._wake()
            raise ProxyUnavailable("scripted")
        if any(r.name == "bad" for r in table.routes):
            self._wake()
            raise ValueError("a route the proxy cannot be told")
        self.applied.append(table)
        self._wake()

    async def health(self) -> Mapping[str, BackendHealth]:
        self.health_calls += 1
        self._wake()
        if self.health_down:
            raise ProxyUnavailable("scripted")
        return {
            s: BackendHealth(session_id=s, healthy=h, detail="scripted")
            for s, h in self.healthy.items()
        }

    async def stats(self) -> Mapping[str, RouteStats]:
        return {"ep-m": RouteStats(requests_total=2, in_flight=1, queued=0, p95_ms=None)}

    def _wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def until(self, check: Callable[[], bool]) -> None:
        with anyio.fail_after(DEADLINE_S):
            while not check():
                await self.changed.wait()


def _table(*sessions: str, **kw: object) -> RouteTable:
    backends = tuple(Backend(session_id=s, host="127.0.0.1", port=9) for s in sessions)
    return RouteTable(
        routes=(Route(endpoint_id="ep-m", name="m", path_prefix="/e/m/", backends=backends, **kw),)
    )  # type: ignore[arg-type]


class Told:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, str]] = []

    async def __call__(self, session_id: str, healthy: bool, detail: str) -> None:
        self.calls.append((session_id, healthy, detail))


async def test_every_proxy_gets_the_newest_table_and_a_failing_one_is_retried() -> None:
    feed, steady, flaky = TableFeed(), ScriptedProxy(), ScriptedProxy(fail_applies=2)
    router = Router(feed, [steady, flaky], Told(), retry_s=0.01)
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        feed.publish(_table("a"))
        await steady.until(lambda: steady.applied == [_table("a")])
        await flaky.until(lambda: flaky.applied == [_table("a")])
        feed.publish(_table("a"))  # the same table: nothing to do
        feed.publish(_table("a", "b"))
        await steady.until(lambda: steady.applied[-1] == _table("a", "b"))
        await flaky.until(lambda: flaky.applied[-1] == _table("a", "b"))
        assert len(steady.applied) == len(flaky.applied) == 2
        tg.cancel_scope.cancel()


async def test_a_table_the_proxy_refuses_waits_for_a_newer_one() -> None:
    feed, proxy = TableFeed(), ScriptedProxy()
    router = Router(feed, [proxy], Told(), retry_s=0.001, health_every_s=0.001)
    bad = RouteTable(routes=(Route(endpoint_id="ep-b", name="bad", path_prefix="/e/bad/"),))
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        feed.publish(_table("a"))
        await proxy.until(lambda: proxy.applied == [_table("a")])
        feed.publish(bad)
        await proxy.until(lambda: proxy.attempts == 2)
        calls = proxy.health_calls
        await proxy.until(lambda: proxy.health_calls >= calls + 3)
        assert proxy.attempts == 2  # not retried: it would be refused again
        feed.publish(_table("c"))
        await proxy.until(lambda: proxy.applied[-1:] == [_table("c")])
        tg.cancel_scope.cancel()


async def test_health_is_told_once_per_change() -> None:
    feed, proxy, told = TableFeed(), ScriptedProxy(), Told()
    router = Router(feed, [proxy], told, health_every_s=0.001)
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        feed.publish(_table("a"))
        proxy.healthy = {"a": True}
        await proxy.until(lambda: len(told.calls) == 1)
        calls = proxy.health_calls
        await proxy.until(lambda: proxy.health_calls >= calls + 3)  # polled again, no news
        assert told.calls == [("a", True, "scripted")]
        proxy.healthy = {"a": False}
        await proxy.until(lambda: len(told.calls) == 2)
        assert told.calls[-1] == ("a", False, "scripted")
        tg.cancel_scope.cancel()


async def test_a_starting_replica_is_not_told_unhealthy_and_the_log_is_not_repeated() -> None:
    feed, proxy, told = TableFeed(), ScriptedProxy(), Told()
    router = Router(feed, [proxy], told, known_health={"known": True}, health_every_s=0.001)
    slow = HealthCheck(initial_delay_s=3600)
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        feed.publish(_table("starting", "known", health=slow))
        proxy.healthy = {"starting": False, "known": True}
        await proxy.until(lambda: proxy.health_calls >= 3)
        assert told.calls == []
        proxy.healthy = {"starting": True, "known": True}
        await proxy.until(lambda: told.calls == [("starting", True, "scripted")])
        tg.cancel_scope.cancel()


async def test_a_proxy_whose_health_fails_is_applied_again() -> None:
    feed, proxy = TableFeed(), ScriptedProxy()
    router = Router(feed, [proxy], Told(), health_every_s=0.001)
    async with anyio.create_task_group() as tg:
        await tg.start(router.run)
        feed.publish(_table("a"))
        await proxy.until(lambda: len(proxy.applied) == 1)
        proxy.health_down = True
        await proxy.until(lambda: proxy.health_calls >= 2)
        proxy.health_down = False
        await proxy.until(lambda: len(proxy.applied) >= 2)  # a restarted proxy serves it again
        assert proxy.applied[-1] == _table("a")
        assert (await router.stats())["ep-m"].requests_total == 2
        tg.cancel_scope.cancel()


async def test_on_the_python_proxy_a_failing_replica_is_told() -> None:
    feed, told = TableFeed(), Told()
    told_again = anyio.Event()

    async def tell(session_id: str, healthy: bool, detail: str) -> None:
        await told(session_id, healthy, detail)
        told_again.set()

    with replicas("r") as (r,):
        async with memory_proxy() as proxy, anyio.create_task_group() as tg:
            router = Router(feed, [proxy], tell, health_every_s=0.02)
            await tg.start(router.run)
            feed.publish(RouteTable(routes=(route("r", backend(r)),)))
            with anyio.fail_after(DEADLINE_S):
                await told_again.wait()
            assert told.calls == [("s-r", True, "HTTP 200")]
            told_again = anyio.Event()
            r.healthy = False
            with anyio.fail_after(DEADLINE_S):
                await told_again.wait()
            assert told.calls[-1] == ("s-r", False, "HTTP 503")
            tg.cancel_scope.cancel()
