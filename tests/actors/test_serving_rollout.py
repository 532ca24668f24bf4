"""Rolling updates, rollback and traffic splits by the serving actor on a real NATS
server with the dummy runtime; who may ask for them."""

from contextlib import aclosing
from datetime import datetime, timedelta

import anyio
import msgspec
import pytest

from events import (
    AddRevision,
    CreateEndpoint,
    PointEndpoint,
    ReplicaChanged,
    ReplicaPhase,
    ReplicasSet,
    RevisionTarget,
    RevokeKeypair,
    RolloutPolicy,
    ServeRefused,
    ServingTicked,
    SessionDestroyRequested,
    SetTraffic,
    TrafficShare,
)
from services.adapters.jetstream import JetStreamLog
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.serving.shape import endpoint_detail
from tests.actors.test_serving import (
    HANG_S,
    SPEC,
    World,
    create,
    endpoint,
    phases,
    replica_requests,
    serving,
    world,
)
from tests.support.routers import report_health

pytestmark = pytest.mark.anyio
POLICY = RolloutPolicy(max_surge=1, max_unavailable=0)


def warming(s: ClusterState, name: str) -> list[str]:
    if name not in s.serving.names:
        return []
    ep = endpoint(s, name)
    return [sid for sid, r in ep.replicas.items() if r.phase is ReplicaPhase.WARMING]


def rolled_out(s: ClusterState, name: str, revision: int, replicas: int) -> bool:
    if name not in s.serving.names:
        return False
    ep = endpoint(s, name)
    final = (RevisionTarget(revision=revision, replicas=replicas),)
    return ep.rollout is None and ep.targets == final


async def healthy_until(
    w: World, who: Client, name: str, revision: int, replicas: int
) -> ClusterState:
    """Every replica that warms up found healthy, until the endpoint's rollout has ended
    at ``replicas`` of ``revision``."""
    while True:
        s = await w.until(
            who, lambda s: rolled_out(s, name, revision, replicas) or bool(warming(s, name))
        )
        if rolled_out(s, name, revision, replicas):
            return s
        await report_health(w.log, endpoint(s, name).endpoint_id, warming(s, name), healthy=True)


async def steps(log: JetStreamLog, endpoint_id: str) -> list[dict[int, int]]:
    """Each ``endpoint.replicas-set`` of the endpoint: replicas by revision."""
    out = []
    async with aclosing(log.read(0)) as batches:
        async for batch in batches:
            for r in batch:
                e = r.event
                if isinstance(e, ReplicasSet) and e.endpoint_id == endpoint_id:
                    out.append({t.revision: t.replicas for t in e.targets})
    return out


async def test_a_rolling_update_and_a_rollback_move_step_by_step_and_ask_nothing_twice(
    log: JetStreamLog,
) -> None:
    async with world(log) as w, serving(log):
        uma = w.client("AKuma")
        await w.answer(uma, create("roll", replicas=2))
        s = await w.until(uma, lambda s: len(warming(s, "roll")) == 2)
        await report_health(log, "ep-roll", warming(s, "roll"), healthy=True)
        await w.until(uma, lambda s: phases(s, "roll") == [ReplicaPhase.HEALTHY] * 2)
        update = AddRevision(endpoint_id="ep-roll", revision=SPEC, rollout=POLICY)
        assert not isinstance(await w.answer(uma, update), ServeRefused)
        s = await w.until(uma, lambda s: "roll" in s.serving.names and bool(warming(s, "roll")))
        shown = endpoint_detail(endpoint(s, "roll"))["rollout"]
        assert (shown["revision"], shown["replicas"], shown["healthy"]) == (2, 2, 0)
        await healthy_until(w, uma, "roll", 2, 2)
        # never more than 3 wanted; the old revision shrank only as new ones became healthy
        assert await steps(log, "ep-roll") == [
            {1: 2},
            {1: 2, 2: 1},
            {1: 1, 2: 2},
            {2: 2},
        ]
        back = PointEndpoint(endpoint_id="ep-roll", revision=1, rollout=POLICY)
        assert not isinstance(await w.answer(uma, back), ServeRefused)
        await healthy_until(w, uma, "roll", 1, 2)
        await w.until(
            uma,
            lambda s: (
                "roll" in s.serving.names
                and {r.revision for r in endpoint(s, "roll").replicas.values()} == {1}
            ),
        )
        assert set((await replica_requests(log)).values()) == {1}


async def test_a_traffic_split_keeps_both_revisions_and_a_stranger_is_refused_everything(
    log: JetStreamLog,
) -> None:
    async with world(log) as w, serving(log):
        uma, vic, oscar = (w.client(k) for k in ("AKuma", "AKvic", "AKoscar"))
        await w.answer(uma, create("split", replicas=2))
        green = AddRevision(endpoint_id="ep-split", revision=SPEC, traffic=0)
        assert not isinstance(await w.answer(uma, green), ServeRefused)
        shares = (TrafficShare(revision=1, traffic=90), TrafficShare(revision=2, traffic=10))
        split = SetTraffic(endpoint_id="ep-split", shares=shares)
        update = AddRevision(endpoint_id="ep-split", revision=SPEC, rollout=POLICY)
        back = PointEndpoint(endpoint_id="ep-split", revision=1, rollout=POLICY)
        for stranger in (vic, oscar):  # another user of its project; another domain's admin
            for c in (split, update, back):
                refused = await w.answer(stranger, c)
                assert isinstance(refused, ServeRefused) and refused.code == "forbidden"
        assert not isinstance(await w.answer(uma, split), ServeRefused)
        s = await w.until(
            uma, lambda s: "split" in s.serving.names and len(endpoint(s, "split").targets) == 2
        )
        assert endpoint(s, "split").targets == (
            RevisionTarget(revision=1, replicas=2, traffic=90),
            RevisionTarget(revision=2, replicas=2, traffic=10),
        )
        bad = SetTraffic(endpoint_id="ep-split", shares=shares[:1])
        refused = await w.answer(uma, bad)
        assert isinstance(refused, ServeRefused) and refused.code == "invalid"
        await w.root.admin(RevokeKeypair(access_key="AKuma"))
        await w.until(uma, lambda s: s.tenancy.user_of("AKuma") is None)
        for c in (split, update, back):
            refused = await w.answer(uma, c)
            assert isinstance(refused, ServeRefused) and refused.code == "forbidden"
        with anyio.fail_after(HANG_S):
            assert endpoint(await uma.state(), "split").rollout is None


async def test_a_replica_late_to_warm_up_is_replaced_and_stopped_after_its_drain_time(
    log: JetStreamLog,
) -> None:
    """Both clocks run on the log: the deadline's verdict and the destroy each follow a
    tick at or past their time."""
    spec = msgspec.structs.replace(SPEC, drain_s=0.5, warmup_s=0.5)
    async with world(log) as w, serving(log):
        uma = w.client("AKuma")
        made = CreateEndpoint(endpoint_id="ep-slow", name="slow", revision=spec, replicas=1)
        await w.answer(uma, made)
        s = await w.until(uma, lambda s: len(warming(s, "slow")) == 1)
        [late] = warming(s, "slow")
        s = await w.until(
            uma,
            lambda s: (
                late in s.sessions
                and s.sessions[late].status.value == "TERMINATED"
                and len(warming(s, "slow")) == 1
            ),
        )
        records = [r.event async for batch in log.read(0) for r in batch]
        assert any(  # its slot's next replica (which may be late in turn)
            isinstance(e, ReplicaChanged)
            and (e.ordinal, e.generation, e.phase) == (0, 1, ReplicaPhase.PROVISIONING)
            for e in records
        )
        times = {
            e.phase: e.at for e in records if isinstance(e, ReplicaChanged) and e.session_id == late
        }
        assert times.keys() >= {ReplicaPhase.WARMING, ReplicaPhase.UNHEALTHY}
        at = {id(e): i for i, e in enumerate(records)}

        def tick_before(i: int) -> datetime:
            return max(e.at for e in records[:i] if isinstance(e, ServingTicked))

        unhealthy = next(
            e
            for e in records
            if isinstance(e, ReplicaChanged)
            and e.session_id == late
            and e.phase is ReplicaPhase.UNHEALTHY
        )
        assert "not healthy within 0.5s" in unhealthy.reason
        assert tick_before(at[id(unhealthy)]) >= times[ReplicaPhase.WARMING] + timedelta(
            seconds=0.5
        )
        draining = next(
            e
            for e in records
            if isinstance(e, ReplicaChanged)
            and e.session_id == late
            and e.phase is ReplicaPhase.DRAINING
        )
        destroy = next(
            e for e in records if isinstance(e, SessionDestroyRequested) and e.session_id == late
        )
        assert tick_before(at[id(destroy)]) >= draining.at + timedelta(seconds=0.5)


async def test_a_serving_actor_restarted_mid_rollout_takes_no_step_twice(
    log: JetStreamLog,
) -> None:
    async with world(log) as w:
        uma = w.client("AKuma")
        async with serving(log):
            await w.answer(uma, create("again", replicas=2))
            s = await w.until(uma, lambda s: len(warming(s, "again")) == 2)
            await report_health(log, "ep-again", warming(s, "again"), healthy=True)
            await w.until(uma, lambda s: phases(s, "again") == [ReplicaPhase.HEALTHY] * 2)
            update = AddRevision(endpoint_id="ep-again", revision=SPEC, rollout=POLICY)
            await w.answer(uma, update)
            await w.until(uma, lambda s: len(warming(s, "again")) == 1)  # the first step
        async with serving(log):  # the same state folded again: the same (no) step
            await healthy_until(w, uma, "again", 2, 2)
        assert await steps(log, "ep-again") == [{1: 2}, {1: 2, 2: 1}, {1: 1, 2: 2}, {2: 2}]
        assert set((await replica_requests(log)).values()) == {1}
