"""The administrators' writes of the web UI (``/ui/admin/...``) on a cluster with tenancy
and a registrar: each is the administrator's own admin request on the log, in its name,
judged by the registrar as the CLI's are; a domain admin is refused in another domain
(the registrar's reason comes back), a superadmin is not; a user is refused before
anything is sent; a new keypair's secret is in the answer once and never on the log."""

from collections.abc import Iterator

import httpx
import pytest

from events import (
    AdminRequested,
    CreateDomain,
    CreateGroup,
    CreateKeypair,
    CreateProject,
    CreateUser,
    Role,
    SetImages,
    SetPolicy,
    UpdateGroup,
)
from events import subjects as subj
from tests.support.ui_world import UiWorld, ui_world

# Besides the world's users (alice, bob, mallory: users of domain default): a domain
# admin of default, one of domain other, and a superadmin.
ADMINS = {"ada": ("default", Role.DOMAIN_ADMIN), "oto": ("other", Role.DOMAIN_ADMIN)}
ADMINS["root"] = ("default", Role.SUPERADMIN)


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-admin"), ("intake", "registrar")) as world:
        world.apply(CreateDomain(domain="other"))
        world.apply(CreateProject(domain="other", project="default"))
        for user, (domain, role) in ADMINS.items():
            world.add_person(user, domain, role, ("default",))
        yield world


def post(
    w: UiWorld, who: str, path: str, body: object = None, method: str = "POST"
) -> httpx.Response:
    http, csrf = w.sign_in(who)
    headers = {"Origin": w.url, "X-CSRF-Token": csrf}
    return http.request(method, path, json=body, headers=headers)


def asked(w: UiWorld, before: int) -> list[tuple[str, AdminRequested]]:
    return [(s, e) for s, e in w.stored_since(before) if isinstance(e, AdminRequested)]


def test_a_domain_admin_creates_a_user_and_its_keypair_as_its_own_requests(w: UiWorld) -> None:
    before = w.last_seq()
    r = post(w, "ada", "/ui/admin/users", {"user": "nia", "domain": "default"})
    assert r.status_code == 200 and r.json()["applied"], r.text
    [(subject, e)] = asked(w, before)
    key = w.keys["ada"][0]
    # Published on ada's own connection, on her subject, in her name: the CLI's request.
    assert subject == subj.admin(key, e.id) and (e.requester, e.actor) == (key, key)
    assert e.id == r.json()["request_id"] and isinstance(e.command, CreateUser)

    before = w.last_seq()
    r = post(w, "ada", "/ui/admin/keypairs", {"user": "nia"})
    made = r.json()
    assert r.status_code == 200 and made["applied"] and made["secret_key"], r.text
    [(_, e)] = asked(w, before)
    assert isinstance(e.command, CreateKeypair) and e.command.access_key == made["access_key"]
    # Only the secret's hash is on the log; the secret signs nia in.
    assert made["secret_key"] not in repr(w.stored_since(before))
    w.keys["nia"] = (made["access_key"], made["secret_key"])
    nia, _ = w.sign_in("nia")
    assert nia.get("/v1/auth/whoami").json()["user"] == "nia"

    r = post(w, "ada", f"/ui/admin/keypairs/{made['access_key']}/revoke")
    assert r.status_code == 200 and r.json()["applied"], r.text
    ada, _ = w.sign_in("ada")
    listed = {k["access_key"]: k["revoked"] for k in ada.get("/v1/keypairs").json()}
    assert listed[made["access_key"]] is True


def test_a_domain_admin_is_refused_in_another_domain_by_the_registrar(w: UiWorld) -> None:
    before = w.last_seq()
    r = post(w, "oto", "/ui/admin/users", {"user": "spy", "domain": "default"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["decided"] and not answer["applied"] and answer["code"] == "forbidden"
    assert "oto may not" in answer["reason"], answer
    assert len(asked(w, before)) == 1  # sent: the registrar judged it, not the web server
    policy = {"level": "user", "target": "alice", "max_sessions": 0}
    r = post(w, "oto", "/ui/admin/policies", policy)
    assert r.json()["code"] == "forbidden", r.text
    keypair = post(w, "oto", "/ui/admin/keypairs", {"user": "alice"}).json()
    assert keypair["code"] == "forbidden" and keypair["secret_key"] is None, keypair
    # And oto reads nothing of domain default.
    oto, _ = w.sign_in("oto")
    assert {u["domain"] for u in oto.get("/v1/users").json()} == {"other"}
    assert "alice" not in {k["user"] for k in oto.get("/v1/keypairs").json()}
    assert {p["domain"] for p in oto.get("/v1/image-policies").json()} == {"other"}


def test_a_domain_policy_is_a_superadmins_and_any_domain_is_its(w: UiWorld) -> None:
    policy = {"level": "domain", "target": "other", "max_fgpu": "1.5", "max_cpu": "4"}
    r = post(w, "ada", "/ui/admin/policies", policy)
    assert r.json()["code"] == "forbidden", r.text
    before = w.last_seq()
    r = post(w, "root", "/ui/admin/policies", policy)
    assert r.status_code == 200 and r.json()["applied"], r.text
    [(_, e)] = asked(w, before)
    assert isinstance(e.command, SetPolicy) and e.command.policy.total_slots is not None
    assert e.command.policy.total_slots.fgpu == 150
    root, _ = w.sign_in("root")
    [shown] = [p for p in root.get("/v1/policies").json() if p["target"] == "other"]
    assert shown["total"]["fgpu"] == "1.5", shown


def test_a_domain_admin_defines_and_removes_its_domains_presets(w: UiWorld) -> None:
    preset = {"name": "half", "fgpu": "0.5", "cpu": "1", "mem": "1g", "domain": "default"}
    r = post(w, "ada", "/ui/admin/presets", preset)
    assert r.status_code == 200 and r.json()["applied"], r.text
    alice, _ = w.sign_in("alice")
    assert "half" in {p["name"] for p in alice.get("/v1/presets").json()}
    r = post(w, "oto", "/ui/admin/presets", {**preset, "name": "theirs"})
    assert r.json()["code"] == "forbidden", r.text  # not oto's domain
    ada, csrf = w.sign_in("ada")
    r = ada.delete(
        "/ui/admin/presets/half",
        params={"domain": "default"},
        headers={"Origin": w.url, "X-CSRF-Token": csrf},
    )
    assert r.status_code == 200 and r.json()["applied"], r.text
    assert "half" not in {p["name"] for p in alice.get("/v1/presets").json()}


def groups(w: UiWorld, who: str) -> dict[str, dict[str, object]]:
    http, _ = w.sign_in(who)
    return {g["group"]: g for g in http.get("/v1/groups").json()}


def test_a_superadmin_creates_changes_and_removes_a_group_as_its_own_requests(
    w: UiWorld,
) -> None:
    before = w.last_seq()
    made = {"group": "gpu-a", "fgpu_quantum": "0.1", "projects": ["default/default"]}
    r = post(w, "root", "/ui/admin/groups", made)
    assert r.status_code == 200 and r.json()["applied"], r.text
    [(subject, e)] = asked(w, before)
    key = w.keys["root"][0]
    assert subject == subj.admin(key, e.id) and (e.requester, e.actor) == (key, key)
    assert isinstance(e.command, CreateGroup) and e.command.settings.fgpu_quantum == 10

    # What is given changes, the rest is kept, and the change names what it was made from.
    before = w.last_seq()
    r = post(w, "root", "/ui/admin/groups/gpu-a", {"fgpu_quantum": "0.25"}, "PATCH")
    assert r.status_code == 200 and r.json()["applied"], r.text
    [(_, e)] = asked(w, before)
    assert isinstance(e.command, UpdateGroup) and e.command.expected is not None
    assert (e.command.expected.fgpu_quantum, e.command.settings.fgpu_quantum) == (10, 25)
    shown = groups(w, "root")["gpu-a"]
    assert (shown["fgpu_quantum"], shown["projects"]) == ("0.25", ["default/default"]), shown

    r = post(w, "root", "/ui/admin/groups/gpu-a", {"clear": ["projects"]}, "PATCH")
    assert r.json()["applied"], r.text
    assert groups(w, "alice")["gpu-a"]["projects"] is None  # open to every project now

    r = post(w, "root", "/ui/admin/groups/gpu-a", method="DELETE")
    assert r.json()["applied"], r.text
    assert "gpu-a" not in groups(w, "root")


def test_a_group_is_a_superadmins_the_registrar_says_so_to_a_domain_admin(
    w: UiWorld,
) -> None:
    before = w.last_seq()
    r = post(w, "ada", "/ui/admin/groups", {"group": "mine"})
    answer = r.json()
    assert answer["code"] == "forbidden" and "ada may not create group" in answer["reason"]
    change = {"policy": "pack", "fgpu_quantum": "0.5"}
    r = post(w, "ada", "/ui/admin/groups/default", change, "PATCH")
    assert r.json()["code"] == "forbidden", r.text
    r = post(w, "ada", "/ui/admin/groups/default", method="DELETE")
    assert r.json()["code"] == "forbidden", r.text
    assert len(asked(w, before)) == 3  # each sent: the registrar judged them

    # A group open to domain default only is not oto's to see: 404, nothing sent.
    post(w, "root", "/ui/admin/groups", {"group": "ours", "projects": ["default/default"]})
    before = w.last_seq()
    r = post(w, "oto", "/ui/admin/groups/ours", {"fgpu_quantum": "0.5"}, "PATCH")
    assert r.status_code == 404 and asked(w, before) == [], r.text
    # One open to both: oto sees its own domain's part of it only, so its change is made
    # from settings that are not the group's. The registrar says what counts, that a group
    # is not a domain admin's (not that it changed since it was read): asked once.
    both = {"projects": ["default/default", "other/default"]}
    assert post(w, "root", "/ui/admin/groups/ours", both, "PATCH").json()["applied"]
    before = w.last_seq()
    r = post(w, "oto", "/ui/admin/groups/ours", {"fgpu_quantum": "0.5"}, "PATCH")
    assert r.json()["code"] == "forbidden" and len(asked(w, before)) == 1, r.text
    assert groups(w, "root")["ours"]["fgpu_quantum"] is None


def test_a_domain_admin_sets_its_domains_images_and_aliases_not_anothers(w: UiWorld) -> None:
    before = w.last_seq()
    allowed = {"images": ["busybox", "fgpu/python:3.11"]}
    r = post(w, "ada", "/ui/admin/images/default", allowed)
    assert r.status_code == 200 and r.json()["applied"], r.text
    [(subject, e)] = asked(w, before)
    key = w.keys["ada"][0]
    assert subject == subj.admin(key, e.id) and (e.requester, e.actor) == (key, key)
    assert e.command == SetImages(domain="default", images=("busybox", "fgpu/python:3.11"))
    alias = {"alias": "team/py", "image": "fgpu/python:3.11"}
    r = post(w, "ada", "/ui/admin/images/default/aliases", alias)
    assert r.json()["applied"], r.text
    alice, _ = w.sign_in("alice")
    [seen] = alice.get("/v1/image-policies").json()
    assert seen["images"] == allowed["images"] and seen["aliases"] == {"team/py": alias["image"]}

    r = post(w, "oto", "/ui/admin/images/default", {"images": None})
    assert r.json()["code"] == "forbidden" and "oto may not" in r.json()["reason"], r.text
    r = post(w, "ada", "/ui/admin/images/default/aliases", {"alias": "x", "image": "Bad Ref"})
    assert r.json()["code"] == "invalid", r.text  # the registrar's judgement, as the CLI's

    r = post(w, "ada", "/ui/admin/images/default/aliases/team/py", method="DELETE")
    assert r.json()["applied"], r.text
    r = post(w, "root", "/ui/admin/images/default", {"images": None})  # any image again
    assert r.json()["applied"], r.text
    [seen] = alice.get("/v1/image-policies").json()
    assert (seen["images"], seen["aliases"]) == (None, {}), seen


def test_the_group_and_image_writes_want_the_csrf_token(w: UiWorld) -> None:
    root, _ = w.sign_in("root")
    before = w.last_seq()
    for method, path, body in (
        ("POST", "/ui/admin/groups", {"group": "sneaky"}),
        ("PATCH", "/ui/admin/groups/default", {"policy": "pack"}),
        ("DELETE", "/ui/admin/groups/ours", None),
        ("POST", "/ui/admin/images/default", {"images": []}),
        ("POST", "/ui/admin/images/default/aliases", {"alias": "a", "image": "busybox"}),
        ("DELETE", "/ui/admin/images/default/aliases/a", None),
    ):
        r = root.request(method, path, json=body, headers={"Origin": w.url})
        assert r.status_code == 403, (method, path, r.text)
    assert asked(w, before) == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/ui/admin/policies", {"level": "user", "target": "bob", "max_fgpu": "0.123"}),
        ("/ui/admin/presets", {"name": "p", "cpu": "lots", "mem": "1g"}),
        ("/ui/admin/users", {"user": "x", "domain": "default", "request_id": "no spaces"}),
        ("/ui/admin/users", {"user": "x", "domain": "default", "role": "king"}),
        ("/ui/admin/groups", {"group": "g", "fgpu_quantum": "0.001"}),  # finer than 0.01
        ("/ui/admin/groups", {"group": "g", "queue": "random"}),
        ("/ui/admin/groups", {"group": "g", "idle_timeout_s": -1}),
        ("PATCH /ui/admin/groups/default", {"fgpu_quantum": "0.1"}),  # no policy: see below
        ("PATCH /ui/admin/groups/default", {"policy": "pack", "clear": ["everything"]}),
        ("/ui/admin/images/default", {}),  # null drops the list: it must be said
        ("/ui/admin/images/default", {"images": [""]}),
        ("/ui/admin/images/default/aliases", {"alias": "py"}),
    ],
)
def test_bad_input_is_refused_with_a_reason_and_nothing_is_sent(
    w: UiWorld, path: str, body: dict[str, str]
) -> None:
    before = w.last_seq()
    method, _, path = path.rpartition(" ")
    r = post(w, "root", path, body, method or "POST")
    assert r.status_code == 422 and r.json()["detail"], r.text
    assert asked(w, before) == []


def test_a_user_administers_nothing_even_its_own_keypairs_here(w: UiWorld) -> None:
    before = w.last_seq()
    for path, body in (
        ("/ui/admin/keypairs", {"user": "alice"}),
        (f"/ui/admin/keypairs/{w.keys['alice'][0]}/revoke", None),
        ("/ui/admin/users", {"user": "x", "domain": "default"}),
    ):
        r = post(w, "alice", path, body)
        assert r.status_code == 403 and "administers nothing" in r.text, r.text
    assert asked(w, before) == []


def test_an_admin_whose_keypair_is_revoked_is_signed_out_and_sends_nothing(w: UiWorld) -> None:
    w.add_person("rex", "default", Role.DOMAIN_ADMIN, ("default",))
    http, csrf = w.sign_in("rex")
    w.revoke("rex")
    before = w.last_seq()
    r = http.post(
        "/ui/admin/users",
        json={"user": "late", "domain": "default"},
        headers={"Origin": w.url, "X-CSRF-Token": csrf},
    )
    assert r.status_code == 401, r.text
    assert asked(w, before) == []
