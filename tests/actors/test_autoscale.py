"""Autoscaling by the serving actor on a real NATS server with the dummy runtime: who
may set a rule, the replicas the routers' traffic reports bring, to zero when idle and
back at a waiting request, and nothing scaled twice across a restart."""

from datetime import UTC, datetime

import pytest

from events import (
    AutoscaleRule,
    ReplicasSet,
    RevokeKeypair,
    RouteStatsReported,
    ServeRefused,
    SetAutoscale,
)
from events import subjects as subj
from services.adapters.jetstream import JetStreamLog
from services.domain.fold.cluster import ClusterState
from services.domain.provenance import Provenance, stamp
from services.domain.serving.routes import route_table
from tests.actors.test_serving import create, endpoint, serving, world

pytestmark = pytest.mark.anyio

RULE = AutoscaleRule(
    metric="rps_per_replica", up=5, down=1, cooldown_s=30, min_replicas=1, max_replicas=3
)


def wanted(s: ClusterState, name: str) -> int | None:
    if name not in s.serving.names:
        return None
    return sum(t.replicas for t in endpoint(s, name).targets)


async def traffic(log: JetStreamLog, endpoint_id: str, requests: int, in_flight: int = 0) -> None:
    """Router r1 says what its proxy counted in the last second."""
    e = stamp(
        RouteStatsReported,
        Provenance("router:r1", datetime.now(UTC)),
        router="r1",
        endpoint_id=endpoint_id,
        window_ms=1000,
        requests=requests,
        in_flight=in_flight,
    )
    await log.append(subj.route("r1"), e)


async def scalings(log: JetStreamLog) -> list[int]:
    found = []
    async for batch in log.read(0):
        for r in batch:
            if isinstance(r.event, ReplicasSet) and r.event.requester == "serving":
                found.append(r.event.targets[0].replicas)
    return found


async def test_only_the_owner_and_its_domains_admin_set_a_rule_and_bad_ones_are_refused(
    log: JetStreamLog,
) -> None:
    async with world(log) as w, serving(log):
        uma, vic, oscar, dora = (w.client(k) for k in ("AKuma", "AKvic", "AKoscar", "AKdora"))
        await w.answer(uma, create("ruled", replicas=1))
        rule = SetAutoscale(endpoint_id="ep-ruled", rule=RULE)
        for stranger in (vic, oscar):  # another user of its project; another domain's admin
            refused = await w.answer(stranger, rule)
            assert isinstance(refused, ServeRefused) and refused.code == "forbidden"
            assert refused.reason == "no endpoint ep-ruled of yours"
        bad = SetAutoscale(
            endpoint_id="ep-ruled", rule=AutoscaleRule(**{**_fields(RULE), "down": 9})
        )
        refused = await w.answer(uma, bad)
        assert isinstance(refused, ServeRefused)
        assert (refused.code, refused.reason) == ("invalid", "autoscaling wants 0 <= down < up")
        assert not isinstance(await w.answer(dora, rule), ServeRefused)
        assert endpoint(await uma.state(), "ruled").autoscale == RULE
        await w.root.admin(RevokeKeypair(access_key="AKuma"))
        await w.until(uma, lambda s: s.tenancy.user_of("AKuma") is None)
        refused = await w.answer(uma, SetAutoscale(endpoint_id="ep-ruled"))
        assert isinstance(refused, ServeRefused) and refused.code == "forbidden"
        assert endpoint(await uma.state(), "ruled").autoscale == RULE


async def test_traffic_scales_up_idle_goes_to_zero_and_a_waiting_request_wakes_it(
    log: JetStreamLog,
) -> None:
    async with world(log) as w:
        uma = w.client("AKuma")
        async with serving(log):
            await w.answer(uma, create("auto", replicas=1))
            await w.answer(uma, SetAutoscale(endpoint_id="ep-auto", rule=RULE))
            quick = AutoscaleRule(**{**_fields(RULE), "cooldown_s": 0.5})
            await w.answer(uma, SetAutoscale(endpoint_id="ep-auto", rule=quick))
            await traffic(log, "ep-auto", requests=12)  # 12 rps on 1 replica: above 5
            await w.until(uma, lambda s: wanted(s, "auto") == 3)  # 6 a replica on 2: up
        async with serving(log):  # a restart scales nothing again: at the maximum
            zero = AutoscaleRule(**{**_fields(quick), "min_replicas": 0})
            await w.answer(uma, SetAutoscale(endpoint_id="ep-auto", rule=zero))
            await traffic(log, "ep-auto", requests=0)  # then nothing: down a step a cooldown
            s = await w.until(uma, lambda s: wanted(s, "auto") == 0)
            [route] = route_table(s.serving, datetime.now(UTC)).routes
            assert route.cold_start_s == zero.cold_start_s  # a proxy holds what comes
            await traffic(log, "ep-auto", requests=0, in_flight=1)  # a request held
            await w.until(uma, lambda s: wanted(s, "auto") == 1)
        assert await scalings(log) == [2, 3, 2, 1, 0, 1]


def _fields(rule: AutoscaleRule) -> dict[str, object]:
    return {f: getattr(rule, f) for f in rule.__struct_fields__}
