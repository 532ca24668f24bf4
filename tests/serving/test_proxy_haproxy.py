"""The proxy contract on a real HAProxy, and what only HAProxy's adapter promises: changes
the runtime API can make never reload it."""

import os
import signal
import stat
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from services.adapters import haproxy_admin as admin
from services.adapters.haproxy_proxy import HaproxyProxy, haproxy_proxy
from services.adapters.nats_server import free_port
from services.adapters.store_lock import alive
from services.domain.serving.route_table import Backend, HealthCheck, RouteTable
from services.ports.proxy import ProxyUnavailable
from tests.support.haproxy_env import require_haproxy
from tests.support.proxy_contract import (
    DEADLINE_S,
    ProxyContract,
    backend,
    next_event,
    route,
    sha256,
    until,
)
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


@pytest.mark.anyio
async def test_a_reload_finishes_the_stream_in_flight(haproxy: HaproxyProxy) -> None:
    host, port = haproxy.address
    with replicas("s", "t") as (s, t):
        await haproxy.apply(RouteTable(routes=(route("s", backend(s)),)))
        base = f"http://{host}:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=DEADLINE_S) as client:
            await client.get("/e/s/who")
            await until(lambda: _counted(haproxy, 1), "the answered request counted")
            async with client.stream("GET", "/e/s/stream?n=2") as response:
                lines = response.aiter_lines()
                assert await next_event(lines) == "data: s 0"
                reloads = haproxy.reloads
                both = (route("s", backend(s)), route("t", backend(t)))
                await haproxy.apply(RouteTable(routes=both))
                assert haproxy.reloads == reloads + 1  # a new route: a new worker
                assert (await client.get("/e/t/who")).json()["name"] == "t"
                s.release()
                assert await next_event(lines) == "data: s 1"  # the old worker finished it
        # What the old worker counted before the reload is kept (not what it answered after).
        assert (await haproxy.stats())["ep-s"].requests_total == 1


async def _unavailable(haproxy: HaproxyProxy) -> bool:
    try:
        await haproxy.health()
    except ProxyUnavailable:
        return True
    return False


async def _worker_pid(haproxy: HaproxyProxy) -> int:
    info = await admin.command(str(haproxy.directory / "admin.sock"), "show info")
    return next(int(x.split(":", 1)[1]) for x in info.splitlines() if x.startswith("Pid:"))


async def _gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped holds no socket either)."""
    return not alive(pid)


async def _counted(haproxy: HaproxyProxy, n: int) -> bool:
    return (await haproxy.stats())["ep-s"].requests_total == n


@pytest.mark.anyio
async def test_a_dead_haproxy_is_started_again_by_the_next_apply(haproxy: HaproxyProxy) -> None:
    host, port = haproxy.address
    with replicas("a") as (a,):
        table = RouteTable(routes=(route("a", backend(a)),))
        await haproxy.apply(table)
        assert haproxy.pid is not None
        worker = await _worker_pid(haproxy)
        os.kill(haproxy.pid, signal.SIGKILL)  # a crash: its worker sees the master go
        await until(lambda: _gone(worker), "its worker gone with it")
        assert await _unavailable(haproxy)
        await haproxy.apply(table)
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
            assert (await client.get("/e/a/who")).json()["name"] == "a"


@pytest.mark.anyio
async def test_a_table_it_cannot_be_told_changes_nothing(haproxy: HaproxyProxy) -> None:
    with replicas("a") as (a,):
        good = RouteTable(routes=(route("a", backend(a)),))
        await haproxy.apply(good)
        bad = msgspec.structs.replace(route("b", backend(a)), path_prefix="/e/b c/")
        with pytest.raises(ValueError, match="prefix"):
            await haproxy.apply(RouteTable(routes=(*good.routes, bad)))
        assert set(await haproxy.stats()) == {"ep-a"}


@pytest.mark.anyio
async def test_its_files_are_its_owners_alone(haproxy: HaproxyProxy) -> None:
    """The admin socket can change every route and the token map: nobody else may reach it."""
    directory = haproxy.directory
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("admin.sock", "haproxy.cfg", "tokens.map"):
        assert stat.S_IMODE((directory / name).stat().st_mode) & 0o077 == 0, name


@pytest.mark.anyio
async def test_a_traffic_split_reaches_haproxy_as_server_weights_without_a_reload(
    haproxy: HaproxyProxy,
) -> None:
    """Blue/green: the route table's weights (a revision's share over its replicas) are
    HAProxy's server weights, set at run time."""
    from services.adapters import haproxy_admin as admin

    with replicas("blue", "green") as (blue, green):
        await haproxy.apply(RouteTable(routes=(route("bg", backend(blue), backend(green, 0)),)))
        split = route("bg", backend(blue, 100), backend(green, 11))
        await haproxy.apply(RouteTable(routes=(split,)))
        assert haproxy.reloads == 1
        text = await admin.command(str(haproxy.directory / "admin.sock"), "show stat")
        found = {
            row["svname"]: row["weight"]
            for row in admin.stat_rows(text)
            if row["svname"] not in ("FRONTEND", "BACKEND") and row["status"] != "MAINT"
        }
        assert sorted(found.values()) == ["100", "11"]


@pytest.mark.anyio
async def test_a_slot_given_to_a_new_replica_is_not_healthy_before_its_own_check(
    haproxy: HaproxyProxy,
) -> None:
    """The slot's last check was of the replica before: a replica not yet listening must
    not read as healthy from it (it would come into rotation and refuse requests)."""
    with replicas("a") as [a]:
        await haproxy.apply(RouteTable(routes=(route("r", backend(a)),)))
        await until(lambda: _healthy(haproxy, "s-a"), "the first replica passes its checks")
        silent = Backend(session_id="s-new", host="127.0.0.1", port=free_port(), weight=0)
        await haproxy.apply(RouteTable(routes=(route("r", silent),)))  # a's slot, warming
        assert not await _healthy(haproxy, "s-new")


async def _healthy(proxy: HaproxyProxy, session_id: str) -> bool:
    seen = (await proxy.health()).get(session_id)
    return seen is not None and seen.healthy


@pytest.mark.anyio
async def test_a_replica_stopped_before_the_proxy_hears_costs_no_request(
    haproxy: HaproxyProxy,
) -> None:
    """A replica drained with no grace is stopped as its draining reaches the log, before
    every proxy has applied the table without it, and its checks take a while to fail:
    a request sent to it meanwhile is refused, and must be retried on another replica
    (else HAProxy retries the same address three times a second apart, then says 503)."""
    slow = HealthCheck(interval_s=60.0, unhealthy_after=2)  # it stays UP all the test long
    host, port = haproxy.address
    gone = Backend(session_id="s-gone", host="127.0.0.1", port=free_port())
    with replicas("a") as [a]:
        await haproxy.apply(RouteTable(routes=(route("r", backend(a), gone, health=slow),)))
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as client:
            answers = [await client.get("/e/r/who") for _ in range(4)]  # round robin: 2 each
    assert [r.status_code for r in answers] == [200] * 4
    assert {r.json()["name"] for r in answers} == {"a"}
