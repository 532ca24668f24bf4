"""An endpoint's replicas on the real Docker engine: each runs on its owner's serving
network, is reached from the host at the address its agent reported, takes traffic once
a router finds it healthy, and one that dies is replaced by one reached anew.

Real Docker, real log, in-process actors (the serving actor among them); the router is
played by the test (its reports on ``fgpu.route.<router>``)."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import pytest

from events import CreateEndpoint, ReplicaPhase, RevisionSpec, Slots
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import serving_network
from services.domain.fold.cluster import ClusterState
from services.domain.serving.routes import route_table
from services.domain.serving.state import EndpointView
from tests.support.cli_stack import docker, remove_agent_containers
from tests.support.cluster import agent_config, running_cluster
from tests.support.docker_env import require_docker
from tests.support.http_probe import get_when_up
from tests.support.routers import report_health

pytestmark = [pytest.mark.anyio, pytest.mark.docker]
AGENT = "serve-e2e"
OWNER = "alice"
SERVE = ("sh", "-c", "mkdir -p /w && echo ok > /w/health && exec httpd -f -p 8000 -h /w")
P = ReplicaPhase


@pytest.fixture
async def runtime() -> AsyncIterator[DockerRuntime]:
    require_docker()
    async with DockerRuntime() as rt:
        yield rt
    remove_agent_containers(AGENT)
    docker("network", "rm", serving_network(OWNER))


def _endpoint(s: ClusterState) -> EndpointView | None:
    return s.serving.endpoints.get("ep-e2e")


def _phases(s: ClusterState) -> list[P]:
    ep = _endpoint(s)
    return [] if ep is None else sorted(r.phase for r in ep.replicas.values())


async def test_replicas_are_reached_at_their_address_and_one_that_dies_is_replaced(
    log: JetStreamLog, runtime: DockerRuntime
) -> None:
    alice = Client(log, SystemClock(), OWNER)
    spec = RevisionSpec(
        image="fgpu/busybox:latest",
        command=SERVE,
        port=8000,
        slots=Slots(cpu=100, mem=64 << 20, fgpu=25),
    )
    async with running_cluster(log, [(agent_config(AGENT, gpus=1), runtime)]):
        await alice.serve(
            CreateEndpoint(endpoint_id="ep-e2e", name="e2e", revision=spec, replicas=2)
        )
        with anyio.fail_after(60):
            s = await alice.wait_until(lambda s: _phases(s) == [P.WARMING] * 2)
            ep = _endpoint(s)
            assert ep is not None
            for r in ep.replicas.values():
                assert r.host is not None and r.host != "127.0.0.1" and r.port == 8000
                assert await get_when_up(r.host, r.port, "/health") == b"ok\n"
            await report_health(log, ep.endpoint_id, ep.replicas, healthy=True)
            s = await alice.wait_until(lambda s: _phases(s) == [P.HEALTHY] * 2)
        [route] = route_table(s.serving, datetime.now(UTC)).routes
        assert sorted(b.weight for b in route.backends) == [100, 100]

        victim = sorted(ep.replicas.values(), key=lambda r: r.ordinal)[0]
        docker("kill", s.sessions[victim.session_id].container_id or "")
        with anyio.fail_after(60):
            s = await alice.wait_until(
                lambda s: (
                    victim.session_id not in (_endpoint(s) or ep).replicas
                    and _phases(s) == sorted([P.WARMING, P.HEALTHY])
                )
            )
            ep = _endpoint(s)
            assert ep is not None
            [fresh] = [r for r in ep.replicas.values() if r.phase is P.WARMING]
            assert (fresh.ordinal, fresh.generation) == (victim.ordinal, 1)
            assert fresh.host is not None and fresh.port is not None
            assert await get_when_up(fresh.host, fresh.port, "/health") == b"ok\n"
        [route] = route_table(s.serving, datetime.now(UTC)).routes
        assert sorted(b.weight for b in route.backends) == [0, 100]
