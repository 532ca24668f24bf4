"""Autoscaling through `fgpu up`'s own router and HAProxy, on the real Docker engine:
a bounded load on loopback takes an endpoint of the model server from 1 replica to 2,
the new one takes requests, and it goes back to 1 once the load stops; an endpoint with
a minimum of 0 goes to zero when idle and its next request, held by HAProxy for the
cold start, is answered by the replica it brought.

One `fgpu up` for the module. What runs in another process has no event this test can
await: it polls the read API and the proxy, each bounded by a generous deadline."""

import json
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.domain.container_spec import serving_network
from tests.e2e.test_serving_proxy import until
from tests.support.cli_stack import Stack, fgpu_up
from tests.support.docker_env import require_docker
from tests.support.haproxy_env import require_haproxy

pytestmark = [pytest.mark.docker, pytest.mark.slow]
IMAGE = ("--image", "fgpu/model-server:latest", "--port", "8080", "--fgpu", "0.25")
SMALL = ("--cpu", "0.25", "--mem", "256m", "--public")
LOAD_CLIENTS = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    require_docker()
    require_haproxy()
    home = tmp_path_factory.mktemp("serve-autoscale")
    with fgpu_up(home, users=("alice",)) as stack:
        yield stack, json.loads((home / "up.json").read_text())["serve_url"]
    key = stack.keys["alice"]["FGPU_ACCESS_KEY"]
    subprocess.run(["docker", "network", "rm", serving_network(key)], capture_output=True)


def _info(stack: Stack, name: str) -> dict[str, Any]:
    got: dict[str, Any] = stack.json("serve", "info", name, key="alice")
    return got


def _serving(stack: Stack, name: str, n: int) -> list[str] | None:
    """The replicas in rotation once there are ``n`` and no other replica."""
    rs = _info(stack, name)["replicas"]
    ok = len(rs) == n and all(r["phase"] == "healthy" and r["in_rotation"] for r in rs)
    return [r["session_id"] for r in rs] if ok else None


def _wanted(stack: Stack, name: str, n: int) -> bool | None:
    ep = _info(stack, name)
    return True if sum(t["replicas"] for t in ep["targets"]) == n and not ep["replicas"] else None


class _Load:
    """Closed-loop clients on loopback until stopped: the replicas that answered."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.replicas: set[str] = set()
        self.failed = 0
        self._threads = [threading.Thread(target=self._run) for _ in range(LOAD_CLIENTS)]

    def __enter__(self) -> "_Load":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join()

    def _run(self) -> None:
        with httpx.Client(timeout=10) as c:
            while not self.stop.is_set():
                r = c.get(self.url)
                if r.status_code == 200:
                    self.replicas.add(r.json()["replica"])
                else:
                    self.failed += 1


def test_load_scales_up_and_the_end_of_it_back_down(served: tuple[Stack, str]) -> None:
    stack, base = served
    stack.fgpu("serve", "create", "busy", *IMAGE, *SMALL, "--replicas", "1", key="alice")
    until(lambda: _serving(stack, "busy", 1), "the first replica in rotation")
    rule = ("--metric", "rps_per_replica", "--up", "5", "--down", "1", "--min", "1")
    stack.fgpu("serve", "autoscale", "busy", *rule, "--max", "2", "--cooldown", "2", key="alice")
    with _Load(f"{base}/e/busy/predict?x=1,2") as load:
        until(lambda: _serving(stack, "busy", 2), "a second replica in rotation under load")
        until(lambda: len(load.replicas) >= 2 or None, "the new replica takes requests")
    assert load.failed == 0
    until(lambda: _serving(stack, "busy", 1), "back to one replica once the load stopped")


def test_an_idle_endpoint_goes_to_zero_and_its_next_request_is_answered(
    served: tuple[Stack, str],
) -> None:
    stack, base = served
    stack.fgpu("serve", "create", "nap", *IMAGE, *SMALL, "--replicas", "1", key="alice")
    rule = ("--metric", "in_flight", "--up", "4", "--down", "1", "--min", "0", "--max", "1")
    stack.fgpu(
        "serve", "autoscale", "nap", *rule, "--cooldown", "2", "--cold-start", "60", key="alice"
    )
    until(lambda: _wanted(stack, "nap", 0), "no replica after the idle cooldown")
    got = httpx.get(f"{base}/e/nap/predict?x=1,2", timeout=90)
    assert got.status_code == 200, got.text  # held, not failed, while a replica came
    assert _serving(stack, "nap", 1) is not None
