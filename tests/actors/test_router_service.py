"""A router as the cluster's service: the log's endpoints served by its proxy, what the
proxy's checks find told on the router's subject (and so turned into rotation by the
serving actor), and a token refused once it expires, with no event to say so."""

import secrets
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import msgspec
import pytest

from events import (
    CreateToken,
    HealthSpec,
    ReplicaHealthReported,
    ReplicaPhase,
    RouteStatsReported,
)
from events import subjects as subj
from services.actors.router_service import RouterService
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.testing.memory_proxy import memory_proxy
from tests.actors.test_serving import SPEC, create, phases, serving, world
from tests.support.model_servers import model_servers
from tests.support.proxy_contract import sha256, until

pytestmark = pytest.mark.anyio
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
