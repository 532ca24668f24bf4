"""``kind: serve`` tasks on a real nats-server with the serving actor and the dummy
runtime: once its dependencies succeed, a serve task asks for its endpoint in the run
owner's name (a new one, or a revision of the owner's endpoint of that name); it succeeds
when the revision's replicas are healthy on the log, fails when serving refuses it."""

from collections.abc import Callable

import pytest

from events import (
    AddRevision,
    CreateEndpoint,
    PipelineSpec,
    ReplicaPhase,
    ServeRequested,
    ServeTask,
)
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.adapters.virtual_clock import VirtualClock
from services.domain.fold.cluster import ClusterState
from services.domain.pipelines.runs import PipelineState
from tests.actors.test_pipeline import actor, ended, task, until
from tests.actors.test_serving import endpoint, phases, serving, world
from tests.support.routers import report_health

pytestmark = pytest.mark.anyio


def deploying(name: str, replicas: int = 1, timeout_s: int | None = None) -> PipelineSpec:
    deploy = task("deploy", "sleep 3600", "prepare", kind="serve", timeout_s=timeout_s)
    deploy = type(deploy)(
        **{f: getattr(deploy, f) for f in deploy.__struct_fields__ if f != "serve"},
        serve=ServeTask(endpoint=name, replicas=replicas),
    )
    return PipelineSpec(name="p", tasks=(task("prepare"), deploy))


def warm(name: str, n: int) -> Callable[[ClusterState], bool]:
    return lambda s: phases(s, name) == [ReplicaPhase.WARMING] * n


async def serve_requests(log: JetStreamLog) -> list[ServeRequested]:
    found = []
    async for batch in log.read(0):
        found += [r.event for r in batch if isinstance(r.event, ServeRequested)]
    return found


async def test_a_serve_task_deploys_in_the_owners_name_and_succeeds_once_healthy(
    log: JetStreamLog,
) -> None:
    async with world(log) as w, serving(log), actor(log):
        uma = w.client("AKuma")
        run_id = await uma.pipeline_run(deploying("sentiment", replicas=2))
        s = await w.until(uma, warm("sentiment", 2))
        ep = endpoint(s, "sentiment")
        runs = await until(log, lambda p: run_id in p.runs)
        assert runs.runs[run_id].tasks["deploy"].status == "requested"  # not healthy yet
        await report_health(log, ep.endpoint_id, ep.replicas, healthy=True)
        runs = await until(log, ended(run_id))
    assert runs.runs[run_id].status == "succeeded"
    assert ep.owner == "AKuma"
    [asked] = await serve_requests(log)
    assert (asked.requester, asked.actor) == ("AKuma", "pipeline")
    assert isinstance(asked.command, CreateEndpoint) and asked.command.replicas == 2


def warm_revision(name: str, revision: int) -> Callable[[ClusterState], bool]:
    def ok(s: ClusterState) -> bool:
        if name not in s.serving.names:
            return False
        replicas = endpoint(s, name).replicas.values()
        return any(r.revision == revision and r.phase is ReplicaPhase.WARMING for r in replicas)

    return ok


async def test_a_second_run_adds_a_revision_to_the_owners_endpoint(log: JetStreamLog) -> None:
    async with world(log) as w, serving(log), actor(log):
        uma = w.client("AKuma")
        first = await uma.pipeline_run(deploying("sentiment"))
        ep = endpoint(await w.until(uma, warm_revision("sentiment", 1)), "sentiment")
        await report_health(log, ep.endpoint_id, ep.replicas, healthy=True)
        await until(log, ended(first))
        second = await uma.pipeline_run(deploying("sentiment"))
        ep = endpoint(await w.until(uma, warm_revision("sentiment", 2)), "sentiment")
        fresh = [sid for sid, r in ep.replicas.items() if r.revision == 2]
        await report_health(log, ep.endpoint_id, fresh, healthy=True)
        runs = await until(log, ended(second))
    assert runs.runs[second].status == "succeeded"
    commands = [r.command for r in await serve_requests(log)]
    assert [type(c) for c in commands] == [CreateEndpoint, AddRevision]


async def test_a_refused_serve_fails_its_task_with_the_reason(log: JetStreamLog) -> None:
    async with world(log) as w, serving(log), actor(log):
        uma = w.client("AKuma")  # a name no endpoint may have: serving refuses it
        run_id = await uma.pipeline_run(deploying("Not_A_Name"))
        runs: PipelineState = await until(log, ended(run_id))
    run = runs.runs[run_id]
    assert run.status == "failed"
    deploy = run.tasks["deploy"]
    assert deploy.status == "failed" and deploy.reason.startswith("serving refused it: ")


async def test_a_cancel_while_a_serve_task_awaits_health_ends_it(log: JetStreamLog) -> None:
    """Nothing would end a serve task's wait but health: a cancel ends it at once (the
    endpoint stays, its owner's as made)."""
    async with world(log) as w, serving(log), actor(log):
        uma = w.client("AKuma")
        run_id = await uma.pipeline_run(deploying("sentiment"))
        await w.until(uma, warm("sentiment", 1))
        await uma.pipeline_cancel(run_id)
        runs = await until(log, ended(run_id))
    run = runs.runs[run_id]
    assert run.status == "cancelled"
    assert run.tasks["deploy"].status == "cancelled"


async def test_a_serve_tasks_timeout_bounds_its_wait_for_health_across_a_restart(
    log: JetStreamLog,
) -> None:
    """Its replicas never healthy: the task fails with the reason ``timeout`` once its
    timeout has passed since its attempt's time on the log, decided by an actor started
    after the deadline as by the one that asked (the clock the actors read is virtual)."""
    clock = VirtualClock(start=SystemClock().now())
    async with world(log) as w, serving(log):
        uma = w.client("AKuma")
        async with actor(log, clock):
            run_id = await uma.pipeline_run(deploying("sentiment", timeout_s=600))
            await w.until(uma, warm("sentiment", 1))
            clock.advance(599)
            runs = await until(log, lambda p: run_id in p.runs)
        assert runs.runs[run_id].tasks["deploy"].status == "requested"  # not over yet
        clock.advance(2)
        async with actor(log, clock):
            runs = await until(log, ended(run_id))
    deploy = runs.runs[run_id].tasks["deploy"]
    assert (runs.runs[run_id].status, deploy.status, deploy.reason) == (
        "failed",
        "failed",
        "timeout",
    )
