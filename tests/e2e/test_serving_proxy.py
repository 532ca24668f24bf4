"""An endpoint served through `fgpu up`'s own router and HAProxy, on the real Docker
engine: the model server's image at 2 replicas of 0.25 fGPU, called with a token at
``/e/<name>/predict``; both replicas answer; no token, another user's token and a
revoked one are refused; a replica whose health fails leaves the rotation while the
other goes on answering, and is replaced. Stopping `fgpu up` leaves no HAProxy behind.

One `fgpu up` for the module. What runs in another process has no event this test can
await: it polls the read API and the proxy, each bounded by a generous deadline."""

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from services.domain.container_spec import serving_network
from tests.support.cli_stack import Stack, fgpu_up
from tests.support.docker_env import require_docker
from tests.support.haproxy_env import haproxy_pids, require_haproxy

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NAME = "tiny"
DEADLINE_S = 120.0
T = TypeVar("T")


def until(check: Callable[[], T | None], what: str, deadline_s: float = DEADLINE_S) -> T:
    """``check()`` once it is not None: another process's state, polled, bounded."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = check()
        if got is not None:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {deadline_s} s: {what}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    require_docker()
    require_haproxy()
    home = tmp_path_factory.mktemp("serve-proxy")
    with fgpu_up(home, users=("alice", "bob")) as stack:
        up = json.loads((home / "up.json").read_text())
        assert up["serve_url"].startswith("http://127.0.0.1:")
        assert stack.process is not None
        ours = haproxy_pids(under=stack.process.pid)
        assert ours, "fgpu up started no haproxy"
        yield stack, up["serve_url"]
    assert not (haproxy_pids() & ours), "fgpu up left its haproxy running"
    for name in ("alice", "bob"):  # the engine is shared: leave no network of ours on it
        key = stack.keys[name]["FGPU_ACCESS_KEY"]
        subprocess.run(["docker", "network", "rm", serving_network(key)], capture_output=True)


def _replicas(stack: Stack, who: str = "alice") -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = stack.json("serve", "info", NAME, key=who)["replicas"]
    return got


def _in_rotation(stack: Stack) -> list[dict[str, Any]] | None:
    rs = _replicas(stack)
    ok = len(rs) == 2 and all(r["phase"] == "healthy" and r["in_rotation"] for r in rs)
    return rs if ok else None


def _token(stack: Stack, who: str, endpoint: str) -> dict[str, str]:
    made: dict[str, str] = stack.json("serve", "token", "create", endpoint, key=who)
    return made


def test_an_endpoint_is_served_through_the_stacks_proxy(served: tuple[Stack, str]) -> None:
    stack, base = served
    image = ("--image", "fgpu/model-server:latest", "--port", "8080", "--fgpu", "0.25")
    stack.fgpu("serve", "create", NAME, *image, "--replicas", "2", "--mem", "256m", key="alice")
    stack.fgpu("serve", "create", "bobs", *image, "--replicas", "0", "--mem", "256m", key="bob")
    replicas = until(lambda: _in_rotation(stack), "both replicas healthy and in rotation")
    token = _token(stack, "alice", NAME)
    bobs = _token(stack, "bob", "bobs")
    url = f"{base}/e/{NAME}/predict?x=1,2"

    def call(t: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {t}"} if t else {}
        return httpx.get(url, headers=headers, timeout=10)

    # The table with the new token reaches the proxy a moment after the answer.
    until(lambda: True if call(token["token"]).status_code == 200 else None, "the token opens")
    answers = [call(token["token"]).json() for _ in range(8)]
    assert {a["label"] for a in answers} <= {0, 1} and all("score" in a for a in answers)
    assert len({a["replica"] for a in answers}) == 2  # both take requests
    assert call(None).status_code == 401
    assert call(bobs["token"]).status_code == 401

    sick = replicas[0]["session_id"]
    stack.fgpu("session", "exec", sick, "--", "touch", "/tmp/unhealthy", key="alice")
    well = until(lambda: _only_others(stack, sick), "the unhealthy replica out of rotation")
    assert well["phase"] == "healthy"
    assert all(call(token["token"]).status_code == 200 for _ in range(6))
    # ... and is replaced: two replicas in rotation again, the sick one not among them.
    again = until(lambda: _in_rotation(stack), "a replacement healthy and in rotation")
    assert sick not in {r["session_id"] for r in again}

    stack.fgpu("serve", "token", "revoke", NAME, token["token_id"], key="alice")
    revoked_at = time.monotonic()
    until(lambda: True if call(token["token"]).status_code == 401 else None, "revoked refused")
    took = time.monotonic() - revoked_at
    print(f"\na revoked token was refused {took:.2f} s after `fgpu serve token revoke` returned")


def _only_others(stack: Stack, sick: str) -> dict[str, Any] | None:
    """A replica in rotation once ``sick`` is not (or is gone)."""
    rs = _replicas(stack)
    if any(r["session_id"] == sick and r["in_rotation"] for r in rs):
        return None
    return next((r for r in rs if r["in_rotation"]), None)
