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
    CreateKeypair,
    CreateProject,
    CreateUser,
    Role,
    SetPolicy,
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


def post(w: UiWorld, who: str, path: str, body: object = None) -> httpx.Response:
    http, csrf = w.sign_in(who)
    return http.post(path, json=body, headers={"Origin": w.url, "X-CSRF-Token": csrf})


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


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/ui/admin/policies", {"level": "user", "target": "bob", "max_fgpu": "0.123"}),
        ("/ui/admin/presets", {"name": "p", "cpu": "lots", "mem": "1g"}),
        ("/ui/admin/users", {"user": "x", "domain": "default", "request_id": "no spaces"}),
        ("/ui/admin/users", {"user": "x", "domain": "default", "role": "king"}),
    ],
)
def test_bad_input_is_refused_with_a_reason_and_nothing_is_sent(
    w: UiWorld, path: str, body: dict[str, str]
) -> None:
    before = w.last_seq()
    r = post(w, "ada", path, body)
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
