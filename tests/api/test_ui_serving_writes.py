"""The web UI's serving actions through its routes, with a browser session's cookie: an
endpoint scaled, moved to another of its revisions (a rollback, a roll forward), its
traffic split between two, its autoscaling rule set and turned off, a token made (shown
in the answer once, only its SHA-256 on the log) and revoked, each as the user's own
serve request, judged by the serving actor; its domain's admin may too; another user is
answered 404 and nothing is sent; a bad count, revision or rule is refused before
anything is sent; every write needs its CSRF token."""

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from events import (
    AddRevision,
    AutoscaleRule,
    AutoscaleSet,
    CreateEndpoint,
    EndpointCreated,
    PointEndpoint,
    ReplicasSet,
    RevisionSpec,
    Role,
    RolloutPolicy,
    RolloutStarted,
    ServeRefused,
    ServeRequested,
    SetAutoscale,
    SetTraffic,
    Slots,
    TokenCreated,
    TokenRevoked,
    TrafficShare,
)
from tests.support.ui_world import UiWorld, ui_world

SPEC = RevisionSpec(image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=1 << 26, fgpu=25))


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-serving"), ("intake", "serving")) as world:
        world.add_person("dana", "default", Role.DOMAIN_ADMIN, ())
        ask = CreateEndpoint(endpoint_id="ep-a", name="alices", revision=SPEC, replicas=0)
        assert isinstance(world.serve("alice", ask), EndpointCreated)
        yield world


def _write(w: UiWorld, who: str, url: str, **kw: Any) -> httpx.Response:
    http, csrf = w.sign_in(who)
    headers = {"Origin": w.url, "X-CSRF-Token": csrf, **kw.pop("headers", {})}
    return http.post(url, headers=headers, **kw)


def _endpoint(w: UiWorld) -> dict[str, Any]:
    http, _ = w.sign_in("alice")
    found: dict[str, Any] = http.get("/v1/endpoints/alices").json()
    return found


def test_the_owner_scales_and_makes_and_revokes_a_token_as_its_own_requests(w: UiWorld) -> None:
    before = w.last_seq()
    r = _write(w, "alice", "/ui/endpoints/alices/scale", json={"replicas": 0})
    assert r.status_code == 200, r.text
    assert r.json()["applied"] and r.json()["decided"]
    stored = [e for _, e in w.stored_since(before)]
    [asked] = [e for e in stored if isinstance(e, ServeRequested)]
    assert asked.requester == w.keys["alice"][0]  # the user's own request, as the CLI's
    assert any(isinstance(e, ReplicasSet) for e in stored)

    r = _write(w, "alice", "/ui/endpoints/ep-a/tokens", json={"days": 2})
    made = r.json()
    assert r.status_code == 200 and made["applied"], r.text
    assert made["token"].startswith("fgt_") and made["token_id"].startswith("t")
    [created] = [e for _, e in w.stored_since(before) if isinstance(e, TokenCreated)]
    assert created.sha256 == hashlib.sha256(made["token"].encode()).hexdigest()
    assert made["token"] not in w.stored_since(before).__repr__()  # only its digest
    [shown] = _endpoint(w)["tokens"]
    assert shown["token_id"] == made["token_id"] and not shown["revoked"]
    assert "token" not in shown

    r = _write(w, "alice", f"/ui/endpoints/alices/tokens/{made['token_id']}/revoke")
    assert r.status_code == 200 and r.json()["applied"], r.text
    assert any(isinstance(e, TokenRevoked) for _, e in w.stored_since(before))
    assert _endpoint(w)["tokens"][0]["revoked"]
    again = _write(w, "alice", f"/ui/endpoints/alices/tokens/{made['token_id']}/revoke").json()
    assert again["decided"] and not again["applied"] and again["code"] == "invalid"
    assert again["refused"] == f"endpoint alices has no live token {made['token_id']}"


def test_the_owner_moves_its_endpoint_between_revisions_as_its_own_requests(
    w: UiWorld,
) -> None:
    ask = CreateEndpoint(endpoint_id="ep-r", name="revs", revision=SPEC, replicas=0)
    assert isinstance(w.serve("alice", ask), EndpointCreated)
    v2 = AddRevision(endpoint_id="ep-r", revision=SPEC)
    assert not isinstance(w.serve("alice", v2), ServeRefused)
    before = w.last_seq()
    r = _write(w, "alice", "/ui/endpoints/revs/point", json={"revision": 1})
    assert r.status_code == 200 and r.json()["applied"], r.text  # back to revision 1
    stored = [e for _, e in w.stored_since(before)]
    [asked] = [e for e in stored if isinstance(e, ServeRequested)]
    assert asked.requester == w.keys["alice"][0]
    assert asked.command == PointEndpoint(
        endpoint_id="ep-r", revision=1, rollout=RolloutPolicy(max_surge=1, max_unavailable=0)
    )
    assert any(isinstance(e, RolloutStarted) and e.revision == 1 for e in stored)

    r = _write(w, "alice", "/ui/endpoints/ep-r/point", json={"revision": 2, "at_once": True})
    assert r.status_code == 200 and r.json()["applied"], r.text
    [_, again] = [e for _, e in w.stored_since(before) if isinstance(e, ServeRequested)]
    assert again.command == PointEndpoint(endpoint_id="ep-r", revision=2, rollout=None)

    r = _write(w, "alice", "/ui/endpoints/revs/point", json={"revision": 9}).json()
    assert r["decided"] and not r["applied"] and r["code"] == "invalid", r


def test_the_owner_splits_the_traffic_as_its_own_request(w: UiWorld) -> None:
    ask = CreateEndpoint(endpoint_id="ep-s", name="split", revision=SPEC, replicas=0)
    assert isinstance(w.serve("alice", ask), EndpointCreated)
    v2 = AddRevision(endpoint_id="ep-s", revision=SPEC)
    assert not isinstance(w.serve("alice", v2), ServeRefused)
    before = w.last_seq()
    halves = [{"revision": 1, "traffic": 50}, {"revision": 2, "traffic": 50}]
    r = _write(w, "alice", "/ui/endpoints/split/traffic", json={"shares": halves})
    assert r.status_code == 200 and r.json()["applied"], r.text
    [asked] = [e for _, e in w.stored_since(before) if isinstance(e, ServeRequested)]
    assert asked.requester == w.keys["alice"][0]
    assert asked.command == SetTraffic(
        endpoint_id="ep-s",
        shares=(TrafficShare(revision=1, traffic=50), TrafficShare(revision=2, traffic=50)),
    )
    http, _ = w.sign_in("alice")
    shown = http.get("/v1/endpoints/split").json()["revisions"]
    assert [(x["revision"], x["traffic"]) for x in shown] == [(1, 50), (2, 50)]
    short = [{"revision": 1, "traffic": 60}]  # not 100: the serving actor's to refuse
    r = _write(w, "alice", "/ui/endpoints/ep-s/traffic", json={"shares": short}).json()
    assert r["decided"] and not r["applied"] and r["code"] == "invalid", r


def test_the_owner_sets_and_turns_off_autoscaling_as_its_own_requests(w: UiWorld) -> None:
    before = w.last_seq()
    rule = {"metric": "in_flight", "up": 4, "down": 1, "min_replicas": 0, "max_replicas": 3}
    r = _write(w, "alice", "/ui/endpoints/alices/autoscale", json={**rule, "cooldown_s": 5})
    assert r.status_code == 200 and r.json()["applied"], r.text
    [set_] = [e for _, e in w.stored_since(before) if isinstance(e, AutoscaleSet)]
    assert set_.rule == AutoscaleRule(
        metric="in_flight", up=4, down=1, min_replicas=0, max_replicas=3, cooldown_s=5
    )
    assert set_.requester == w.keys["alice"][0]
    assert _endpoint(w)["autoscale"]["max_replicas"] == 3

    r = _write(w, "alice", "/ui/endpoints/alices/autoscale", json={"off": True})
    assert r.status_code == 200 and r.json()["applied"], r.text
    [_, off] = [e for _, e in w.stored_since(before) if isinstance(e, ServeRequested)]
    assert off.command == SetAutoscale(endpoint_id="ep-a", rule=None)
    assert _endpoint(w)["autoscale"] is None


def test_its_domains_admin_may_and_another_user_is_told_of_no_endpoint(w: UiWorld) -> None:
    r = _write(w, "dana", "/ui/endpoints/alices/scale", json={"replicas": 0})
    assert r.status_code == 200 and r.json()["applied"], r.text
    before = w.last_seq()
    for url, body in (
        ("/ui/endpoints/alices/scale", {"replicas": 3}),
        ("/ui/endpoints/ep-a/tokens", {}),
        ("/ui/endpoints/alices/tokens/t1/revoke", None),
        ("/ui/endpoints/alices/point", {"revision": 1}),
        ("/ui/endpoints/ep-a/autoscale", {"off": True}),
        ("/ui/endpoints/alices/traffic", {"shares": [{"revision": 1, "traffic": 100}]}),
    ):
        r = _write(w, "bob", url, json=body)
        assert r.status_code == 404, r.text
        assert r.json()["detail"] == "no endpoint " + url.split("/")[3]
    assert [s for s, _ in w.stored_since(before) if not s.startswith("fgpu.access.")] == []


def test_a_bad_count_or_a_write_without_its_csrf_token_sends_nothing(w: UiWorld) -> None:
    before = w.last_seq()
    for body in ({"replicas": 65}, {"replicas": -1}, {}, None):
        r = _write(w, "alice", "/ui/endpoints/alices/scale", json=body)
        assert r.status_code == 422, r.text
    r = _write(w, "alice", "/ui/endpoints/alices/tokens", json={"days": 0})
    assert r.status_code == 422, r.text
    for body in (
        {},
        {"revision": 0},
        {"revision": 1, "max_surge": 0, "max_unavailable": 0},
    ):
        r = _write(w, "alice", "/ui/endpoints/alices/point", json=body)
        assert r.status_code == 422, r.text
    for body in (
        {},
        {"shares": []},
        {"shares": [{"revision": 1, "traffic": 101}]},
        {"shares": [{"revision": 0, "traffic": 100}]},
    ):
        r = _write(w, "alice", "/ui/endpoints/alices/traffic", json=body)
        assert r.status_code == 422, r.text
    rule = {"metric": "in_flight", "up": 4, "down": 1, "max_replicas": 3}
    for body, said in (
        ({**rule, "down": 4}, "autoscaling wants 0 <= down < up"),
        ({**rule, "max_replicas": 65}, "autoscaling wants 0 <= min <= max <= 64 and max >= 1"),
        ({"metric": "in_flight", "up": 4}, "give metric, up, down and max_replicas (or off)"),
    ):
        r = _write(w, "alice", "/ui/endpoints/alices/autoscale", json=body)
        assert r.status_code == 422 and r.json()["detail"] == said, r.text
    r = _write(w, "alice", "/ui/endpoints/alices/autoscale", json={**rule, "metric": "cpu"})
    assert r.status_code == 422, r.text
    r = _write(w, "alice", "/ui/endpoints/alices/tokens", headers={"X-CSRF-Token": "x" * 43})
    assert r.status_code == 403, r.text
    assert [s for s, _ in w.stored_since(before) if not s.startswith("fgpu.access.")] == []
