"""A router as the cluster's service: the log's endpoints served by its proxy, what the
proxy's checks find told on the router's subject (and so turned into rotation by the
serving actor), and a token refused once it expires, with no event to say so."""

import secrets
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import anyio
import httpx
import msgspec
import pytest

from events import (
    AutoscaleRule,
    CreateToken,
    HealthSpec,
    ReplicaHealthReported,
    ReplicaPhase,
    ReplicasSet,
    RouteStatsReported,
    SetAutoscale,
)
from events import subjects as subj
from services.actors.router_service import RouterService
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.domain.fold.cluster import ClusterState
from services.testing.memory_proxy import memory_proxy
from tests.actors.test_serving import SPEC, create, endpoint, phases, serving, world
from tests.support.model_servers import model_servers
from tests.support.proxy_contract import sha256, until

pytestmark = pytest.mark.anyio
T = TypeVar("T")
FAST = HealthSpec(interval_s=0.1, timeout_s=0.5)


async def test_a_router_serves_the_logs_endpoints_and_tells_their_health(
    log: JetStreamLog,
) -> None:
    with model_servers(1) as [(_, port)]:
        spec = msgspec.structs.replace(SPEC, port=port, health=FAST)
        async with world(log) as w, serving(log), memory_proxy() as proxy:
            router = RouterService(log, SystemClock(), "r1", [proxy], health_every_s=0.1)
            async with anyio.create_task_group() as tg:
                await tg.start(router.run)
                uma = w.client("AKuma")
                await w.answer(uma, msgspec.structs.replace(create("sentiment"), revision=spec))
                healthy = [ReplicaPhase.HEALTHY] * 2
                s = await w.until(uma, lambda s: phases(s, "sentiment") == healthy)
                reports = await _reports(log)
                assert {r.session_id for r in reports} == set(s.serving.replica_of)
                assert {(r.router, r.healthy, r.actor) for r in reports} == {
                    ("r1", True, "router:r1")
                }

                token = secrets.token_urlsafe(16)
                soon = datetime.now(UTC) + timedelta(seconds=2)
                await w.answer(uma, _token("ep-sentiment", token, soon))
                host, proxy_port = proxy.address
                url = f"http://{host}:{proxy_port}/e/sentiment/predict?x=1,2"
                auth = {"Authorization": f"Bearer {token}"}
                async with httpx.AsyncClient(timeout=5) as c:

                    async def status() -> int:
                        return (await c.get(url, headers=auth)).status_code

                    await until(lambda: _is(status, 200), "the token opens the endpoint")
                    assert (await c.get(url)).status_code == 401
                    seq = await log.last_seq()
                    await until(lambda: _is(status, 401), "an expired token is refused")
                    # expiry is time, not an event (traffic reports aside)
                    assert await _types_after(log, seq) <= {RouteStatsReported}
                tg.cancel_scope.cancel()


async def _is(status: Callable[[], Awaitable[int]], code: int) -> bool:
    return await status() == code


async def _types_after(log: JetStreamLog, seq: int) -> set[type]:
    found: set[type] = set()
    async with aclosing(log.read(seq)) as batches:
        async for batch in batches:
            found |= {type(r.event) for r in batch}
    return found


async def _reports(log: JetStreamLog) -> list[ReplicaHealthReported]:
    found: list[ReplicaHealthReported] = []
    async with aclosing(log.read(0)) as batches:
        async for batch in batches:
            for r in batch:
                if isinstance(r.event, ReplicaHealthReported):
                    assert r.subject == subj.route("r1")
                    found.append(r.event)
    return found


def _token(endpoint_id: str, token: str, expires_at: datetime) -> CreateToken:
    return CreateToken(
        endpoint_id=endpoint_id, token_id="t1", sha256=sha256(token), expires_at=expires_at
    )


async def test_an_idle_endpoint_goes_to_zero_and_a_request_held_by_the_proxy_wakes_it(
    log: JetStreamLog,
) -> None:
    """The router's traffic reports are what the serving actor scales by: none for the
    cooldown takes the endpoint to zero; a request held for the cold start shows in the
    next report, a replica comes, and the held request is answered."""
    with model_servers(1) as [(_, port)]:
        spec = msgspec.structs.replace(SPEC, port=port, health=FAST)
        async with world(log) as w, serving(log), memory_proxy() as proxy:
            router = RouterService(
                log, SystemClock(), "r1", [proxy], health_every_s=0.1, stats_every_s=0.1
            )
            async with anyio.create_task_group() as tg:
                await tg.start(router.run)
                uma = w.client("AKuma")
                cold = msgspec.structs.replace(create("cold"), revision=spec, public=True)
                await w.answer(uma, cold)
                rule = AutoscaleRule(
                    metric="in_flight",
                    up=4,
                    down=1,
                    cooldown_s=0.5,
                    min_replicas=0,
                    max_replicas=2,
                    cold_start_s=20,
                )
                await w.answer(uma, SetAutoscale(endpoint_id="ep-cold", rule=rule))
                await w.until(uma, lambda s: _at_zero(s, "cold"))
                host, proxy_port = proxy.address
                async with httpx.AsyncClient(timeout=30) as c:
                    got = await c.get(f"http://{host}:{proxy_port}/e/cold/predict?x=1,2")
                assert got.status_code == 200  # held, not failed, until the replica came
                scaled = [e for e in await _events(log, ReplicasSet) if e.requester == "serving"]
                assert [e.targets[0].replicas for e in scaled] == [1, 0, 1]
                causes = {e.id: e for e in await _events(log, RouteStatsReported)}
                wake = scaled[-1]
                assert wake.causation_id is not None
                assert causes[wake.causation_id].in_flight >= 1  # woken by a held request
                tg.cancel_scope.cancel()


def _at_zero(s: ClusterState, name: str) -> bool:
    if name not in s.serving.names:
        return False
    ep = endpoint(s, name)
    return ep.targets[0].replicas == 0 and not ep.replicas


async def _events(log: JetStreamLog, kind: type[T]) -> list[T]:
    found: list[T] = []
    async with aclosing(log.read(0)) as batches:
        async for batch in batches:
            found += [r.event for r in batch if isinstance(r.event, kind)]
    return found
