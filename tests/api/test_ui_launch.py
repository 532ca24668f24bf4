"""The launch form's routes on a whole cluster (quota, scheduler, one agent whose one mock
GPU is worth 2 fGPU): what ``/v1/launch-options`` tells a user (its own images, groups,
projects, presets, what is free and what its policies leave, nothing of another user's),
and ``POST /ui/sessions``: refused without the CSRF token, from another origin or
anonymously; else the user's own request on the log, judged as the CLI's: admitted, or
refused with the policy level and limit, a project or group not the user's refused."""

from collections.abc import Iterator

import httpx
import pytest

from events import (
    CreateGroup,
    CreatePreset,
    CreateProject,
    GroupSettings,
    PolicyLevel,
    ResourcePolicy,
    SessionRequested,
    SetImageAlias,
    SetPolicy,
    Slots,
)
from events import subjects as subj
from events.slots import AMOUNT_LIMIT
from tests.support.ui_world import CLUSTER, IMAGE, UiWorld, ui_world

GIB = 1 << 30


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-launch"), CLUSTER) as world:
        # Bob's own project and a group open to it alone; a preset for the domain; an
        # alias; mallory may hold 0.25 fGPU in all.
        world.apply(CreateProject(domain="default", project="bobs"))
        world.apply(
            CreateGroup(group="bobs-gpus", settings=GroupSettings(projects=("default/bobs",)))
        )
        world.apply(CreateGroup(group="tenths", settings=GroupSettings(fgpu_quantum=10)))
        world.apply(
            CreatePreset(name="half", slots=Slots(cpu=1000, mem=GIB, fgpu=50), domain="default")
        )
        world.apply(
            CreatePreset(name="elsewhere", slots=Slots(cpu=1000, mem=GIB, fgpu=0), domain="other")
        )
        world.apply(SetImageAlias(domain="default", alias="bb", image=IMAGE))
        most = Slots(cpu=AMOUNT_LIMIT, mem=AMOUNT_LIMIT, fgpu=25)
        world.apply(
            SetPolicy(
                level=PolicyLevel.USER, target="mallory", policy=ResourcePolicy(total_slots=most)
            )
        )
        yield world


def _form(**given: object) -> dict[str, object]:
    return {"image": IMAGE, "fgpu": "0.5", "cpu": "0.1", "mem": "256m", **given}


def _launch(w: UiWorld, who: str, **given: object) -> httpx.Response:
    http, csrf = w.sign_in(who)
    headers = {"Origin": w.url, "X-CSRF-Token": csrf}
    return http.post("/ui/sessions", json=_form(**given), headers=headers)


def test_launch_options_are_the_users_own(w: UiWorld) -> None:
    alice, _ = w.sign_in("alice")
    r = alice.get("/v1/launch-options")
    assert r.status_code == 200, r.text
    o = r.json()
    assert (o["user"], o["domain"], o["projects"], o["default_project"]) == (
        "alice",
        "default",
        ["default"],
        "default",
    )
    assert o["any_image"] is True
    refs = {i["ref"]: i for i in o["images"]}
    assert refs["bb"]["runs"] == IMAGE and refs[IMAGE]["held"] is True
    groups = {g["group"]: g for g in o["groups"]}
    assert set(groups) == {"default", "tenths"}  # bob's group is not hers to see
    assert groups["tenths"]["fgpu_quantum"] == "0.1" and groups["default"]["fgpu_quantum"] == "0.01"
    assert (groups["default"]["agents"], groups["default"]["fgpu_per_gpu"]) == (1, "2")
    assert groups["tenths"]["agents"] == 0 and groups["tenths"]["largest_fgpu"] == "0"
    assert [p["name"] for p in o["presets"]] == ["half"]  # not another domain's
    levels = {(p["level"], p["target"]) for p in o["policies"]}
    key = w.keys["alice"][0]
    assert levels == {
        ("keypair", key),
        ("user", "alice"),
        ("project", "default/default"),
        ("domain", "default"),
    }
    text = r.text
    for other in ("bob", "mallory"):
        assert w.keys[other][0] not in text and w.sessions[other] not in text
    assert "bobs" not in text


def test_launch_options_say_what_a_policy_leaves_and_what_is_free(w: UiWorld) -> None:
    mallory, _ = w.sign_in("mallory")
    o = mallory.get("/v1/launch-options").json()
    [user] = [p for p in o["policies"] if p["level"] == "user"]
    # Her first session (0.5 fGPU, in the world) was admitted before the policy was set.
    assert user["total"]["fgpu"] == "0.25" and user["held"]["fgpu"] == "0.5"
    assert user["remaining"]["fgpu"] == "0" and user["remaining"]["cpu"] == "unlimited"
    [default] = [g for g in o["groups"] if g["group"] == "default"]
    # One GPU of 2 fGPU holds the three first sessions' 0.5 each, or some of them.
    assert default["largest_fgpu"] in ("0.5", "1", "1.5", "2")


def test_anonymous_and_forged_reads_of_the_options_are_refused(w: UiWorld) -> None:
    assert httpx.get(f"{w.url}/v1/launch-options").status_code == 401
    assert httpx.get(f"{w.url}/v1/presets").status_code == 401


def test_a_launch_without_its_csrf_token_or_from_another_origin_is_refused(w: UiWorld) -> None:
    http, csrf = w.sign_in("alice")
    before = w.last_seq()
    refused = [
        http.post("/ui/sessions", json=_form(), headers={"Origin": w.url}),
        http.post("/ui/sessions", json=_form(), headers={"X-CSRF-Token": csrf}),
        http.post(
            "/ui/sessions",
            json=_form(),
            headers={"Origin": "http://evil.example", "X-CSRF-Token": csrf},
        ),
        http.post(
            "/ui/sessions",
            json=_form(),
            headers={"Origin": w.url, "X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"},
        ),
    ]
    assert [r.status_code for r in refused] == [403] * 4, [r.text for r in refused]
    anonymous = httpx.post(f"{w.url}/ui/sessions", json=_form(), headers={"Origin": w.url})
    assert anonymous.status_code == 401
    assert not [e for _, e in w.stored_since(before) if isinstance(e, SessionRequested)]


def test_a_launch_is_the_users_own_request_admitted_as_the_clis(w: UiWorld) -> None:
    before = w.last_seq()
    r = _launch(w, "alice", name="from-the-form", group="tenths", count=2, request_id="r-form-1")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["decided"] is True and out["refused"] is None, out
    ids = [s["id"] for s in out["sessions"]]
    assert len(ids) == 2 and {s["status"] for s in out["sessions"]} == {"PENDING"}  # no agent
    key = w.keys["alice"][0]
    stored = [(s, e) for s, e in w.stored_since(before) if isinstance(e, SessionRequested)]
    assert sorted(e.session_id for _, e in stored) == sorted(ids)
    for subject, e in stored:
        assert subject == subj.request(key, e.session_id)
        assert (e.owner, e.actor, e.name, e.group) == (key, key, "from-the-form", "tenths")
        assert e.slots == Slots(cpu=100, mem=256 << 20, fgpu=50)
    # Sent again with the same request id: the same sessions, once.
    again = _launch(
        w, "alice", name="from-the-form", group="tenths", count=2, request_id="r-form-1"
    )
    assert [s["id"] for s in again.json()["sessions"]] == ids
    assert len([e for _, e in w.stored_since(before) if isinstance(e, SessionRequested)]) == 2


def test_a_launch_over_a_policy_comes_back_refused_naming_the_level_and_limit(
    w: UiWorld,
) -> None:
    r = _launch(w, "mallory")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["decided"] is True
    assert out["refused"].startswith("user policy (mallory) allows 0.25 fGPU"), out
    assert "held: 0.5 fGPU" in out["refused"]
    assert [s["status"] for s in out["sessions"]] == ["REJECTED"]


@pytest.mark.parametrize(
    ("given", "refused"),
    [
        ({"project": "bobs"}, "user alice is not a member of project default/bobs"),
        ({"group": "bobs-gpus"}, "no resource group bobs-gpus open to project default/default"),
        ({"group": "tenths", "fgpu": "0.55"}, "resource group tenths gives fGPU in steps of 0.1"),
    ],
)
def test_another_users_project_or_group_cannot_be_used(
    w: UiWorld, given: dict[str, str], refused: str
) -> None:
    out = _launch(w, "alice", **given).json()
    assert out["refused"] is not None and out["refused"].startswith(refused), out


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"fgpu": "lots"}, "fGPU must be a number"),
        ({"fgpu": "0.001"}, "multiple of 0.01"),
        ({"session_type": "batch"}, "a batch session runs a command"),
        ({"image": "Not An Image"}, ""),
        ({"mounts": [":ro"]}, "a folder's name"),
        ({"project": "default/default"}, "1-64 letters"),
    ],
)
def test_a_launch_that_could_never_run_is_refused_before_sending(
    w: UiWorld, given: dict[str, object], why: str
) -> None:
    before = w.last_seq()
    r = _launch(w, "alice", **given)
    assert r.status_code == 422 and why in r.json()["detail"], r.text
    assert not [e for _, e in w.stored_since(before) if isinstance(e, SessionRequested)]
