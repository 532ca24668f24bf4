"""A rolling update and a rollback through `fgpu up`'s router and HAProxy, on the real
Docker engine, under steady load from a bounded loopback load generator: no request
fails, and the answers move from one revision's model to the other's. Another tenant
may not update, roll back or split the traffic of the endpoint.

One `fgpu up` for the module; what runs in another process has no event this test can
await, so it polls the read API and the proxy, each bounded by a generous deadline."""

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_serving_proxy import served, until
from tests.support.cli_stack import Stack

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NAME = "roll"
IMAGE = ("--image", "fgpu/model-server:latest", "--port", "8080", "--fgpu", "0.25")
SIZE = ("--mem", "256m", "--drain", "3")
__all__ = ["served"]  # the module's fgpu up, shared with the proxy's test


class Load:
    """A closed loop of requests on one connection, until stopped (bounded by ``limit_s``
    seconds, not a count: a fast host must not run out of requests mid-rollout): every
    answer's status and model counted."""

    def __init__(self, url: str, limit_s: float = 600.0) -> None:
        self.url = url
        self.limit_s = limit_s
        self.statuses: Counter[int | str] = Counter()
        self.models: list[str] = []
        self.ended: str | None = None  # why the loop ended, once it has
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # said by answers_after, not lost in a thread
            self.ended = f"raised {e!r}"
            raise
        self.ended = self.ended or "stopped"

    def _loop(self) -> None:
        end = time.monotonic() + self.limit_s
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                if time.monotonic() > end:
                    self.ended = f"ran {self.limit_s} s"
                    return
                try:
                    r = client.get(self.url)
                except httpx.HTTPError as e:
                    self.statuses[type(e).__name__] += 1
                    continue
                self.statuses[r.status_code] += 1
                if r.status_code == 200:
                    self.models.append(r.json()["model"])

    def answers_after(self, seen: int, more: int = 20) -> bool | None:
        """True once ``more`` answers came after the first ``seen``; fails at once if the
        loop has ended (it would never answer again)."""
        if len(self.models) > seen + more:
            return True
        assert self.ended is None, f"the load ended ({self.ended}): {dict(self.statuses)}"
        return None

    def __enter__(self) -> "Load":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _settled(stack: Stack, revision: int) -> dict[str, Any] | None:
    """The endpoint once its rollout has ended at 2 replicas of ``revision``, both healthy
    and in rotation, and no other replica is left."""
    ep: dict[str, Any] = stack.json("serve", "info", NAME, key="alice")
    rs = ep["replicas"]
    done = (
        ep["rollout"] is None
        and ep["targets"] == [{"revision": revision, "replicas": 2, "traffic": 100}]
        and len(rs) == 2
        and all(r["revision"] == revision and r["in_rotation"] for r in rs)
    )
    return ep if done else None


@pytest.fixture(scope="module")
def rolling(served: tuple[Stack, str]) -> Iterator[tuple[Stack, str]]:
    stack, base = served
    env = ("--env", "MODEL_NAME=v1")
    stack.fgpu(
        "serve", "create", NAME, *IMAGE, *SIZE, *env, "--replicas", "2", "--public", key="alice"
    )
    until(lambda: _settled(stack, 1), "revision 1 healthy at 2 replicas")
    url = f"{base}/e/{NAME}/predict?x=1,2"
    until(lambda: True if httpx.get(url, timeout=10).status_code == 200 else None, "served")
    yield stack, url


def test_a_rolling_update_and_a_rollback_under_load_fail_no_request(
    rolling: tuple[Stack, str],
) -> None:
    stack, url = rolling
    with Load(url) as load:
        until(lambda: True if load.models else None, "the load answered")
        stack.fgpu("serve", "update", NAME, *IMAGE, *SIZE, "--env", "MODEL_NAME=v2", key="alice")
        until(lambda: _settled(stack, 2), "revision 2 rolled out")
        seen = len(load.models)
        until(lambda: load.answers_after(seen), "answers after the update")
        after_update = load.models[-10:]
        stack.fgpu("serve", "rollback", NAME, key="alice")
        until(lambda: _settled(stack, 1), "rolled back to revision 1")
        seen = len(load.models)
        until(lambda: load.answers_after(seen), "answers after rollback")
    assert set(after_update) == {"v2"} and set(load.models[-10:]) == {"v1"}
    assert {"v1", "v2"} <= set(load.models)
    failed = {k: n for k, n in load.statuses.items() if k != 200}
    assert not failed, f"{failed} of {sum(load.statuses.values())} requests failed"
    print(f"\n{sum(load.statuses.values())} requests through an update and a rollback, none failed")


def test_another_tenant_may_not_update_roll_back_or_split_the_endpoint(
    rolling: tuple[Stack, str],
) -> None:
    stack, _ = rolling
    for args in (
        ("update", NAME, *IMAGE),
        ("rollback", NAME, "--to", "1"),
        ("traffic", NAME, "1=100"),
    ):
        refused = stack.run("serve", *args, key="bob")
        assert refused.returncode == 2, refused
        assert refused.stderr.strip() == f"error: no endpoint {NAME!r} of yours"
