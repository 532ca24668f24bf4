"""``fgpu admin``, ``fgpu login`` and ``fgpu whoami`` against a cluster with tenancy: every
change is answered by the registrar and said, refusals with their reason on stderr."""

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from tests.support.tenanted_cli import Tenanted, tenanted

IMAGE = "fgpu/busybox:latest"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenanted]:
    with tenanted(tmp_path_factory.mktemp("tenancy")) as found:
        yield found


def test_an_administrator_sets_up_a_team(cluster: Tenanted) -> None:
    cluster.ok("admin", "domain", "create", "lab")
    cluster.ok("admin", "project", "create", "lab/vision")
    cluster.ok("admin", "user", "create", "ana", "--domain", "lab", "--project", "vision")
    made = cluster.ok("admin", "keypair", "create", "--user", "ana")
    assert made["applied"] and made["secret_key"] and made["access_key"].startswith("AK")
    users = {u["user"]: u for u in cluster.ok("admin", "user", "ls")}
    assert users["ana"] == {
        "user": "ana",
        "domain": "lab",
        "role": "user",
        "projects": ["vision"],
        "default_project": "vision",
    }
    keys = {k["access_key"]: k for k in cluster.ok("admin", "keypair", "ls")}
    assert keys[made["access_key"]] == {
        "access_key": made["access_key"],
        "user": "ana",
        "service": None,
        "revoked": False,
    }
    assert made["secret_key"] not in json.dumps(cluster.ok("admin", "keypair", "ls"))
    # Ana's session goes to her project; a policy she may not set is refused with why.
    ana = made["access_key"]
    create = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--wait", "--", "true"]
    [session] = cluster.ok(*create, key=ana)["sessions"]
    assert (session["user"], session["project"]) == ("ana", "lab/vision")
    [other] = cluster.ok(*create[:-2], "--project", "vision", "--", "true", key=ana)["sessions"]
    assert other["project"] == "lab/vision"
    wrong = cluster.run(*create[:-2], "--project", "nope", "--json", "--", "true", key=ana)
    assert wrong.exit_code == 1
    assert json.loads(wrong.stdout)["sessions"][0]["reason"] == (
        "user ana is not a member of project lab/nope"
    )
    assert (
        cluster.run(*create[:-2], "--project", "lab/vision", "--", "true", key=ana).exit_code == 2
    )
    refused = cluster.run("admin", "policy", "set", "--keypair", ana, "--max-fgpu", "9", key=ana)
    assert refused.exit_code == 1
    assert refused.stderr == "error: refused (forbidden): user ana may not set policy\n"


def test_a_policy_refusal_names_its_level_and_says_unlimited(cluster: Tenanted) -> None:
    cluster.ok("admin", "user", "create", "dave", "--domain", "default", "--project", "default")
    dave = cluster.ok("admin", "keypair", "create", "--user", "dave")["access_key"]
    set_ = ["admin", "policy", "set", "--user", "dave", "--max-fgpu", "0.25"]
    cluster.ok(*set_)
    policies = {(p["level"], p["target"]): p for p in cluster.ok("admin", "policy", "ls")}
    assert policies["user", "dave"]["total"]["fgpu"] == "0.25"
    assert policies["user", "dave"]["total"]["cpu"] == "unlimited"
    create = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--wait", "--", "true"]
    result = cluster.run(*create[:-2], "--json", "--", "true", key=dave)
    assert result.exit_code == 1
    [refused] = json.loads(result.stdout)["sessions"]
    assert refused["reason"] == (
        "user policy (dave) allows 0.25 fGPU, unlimited cpu, unlimited mem in total; "
        "held: 0 fGPU, 0 cpu, 0B mem"
    )


def test_bad_admin_input_is_refused_at_the_door_or_by_the_registrar(cluster: Tenanted) -> None:
    assert cluster.run("admin", "project", "create", "noslash").exit_code == 2
    assert (
        cluster.run("admin", "user", "create", "x", "--domain", "lab", "--role", "god").exit_code
        == 2
    )
    taken = cluster.run("admin", "domain", "create", "default")
    assert taken.exit_code == 1 and "refused (conflict): domain default exists" in taken.stderr
    both = cluster.run("admin", "policy", "set", "--user", "a", "--domain", "b")
    assert both.exit_code == 2 and "name one of" in both.stderr


def test_login_stores_the_keypair_for_the_owner_only(
    cluster: Tenanted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FGPU_HOME", str(tmp_path))
    monkeypatch.delenv("FGPU_ACCESS_KEY", raising=False)
    root = cluster.root
    logged = CliRunner().invoke(
        app, ["login", "--access-key", root.access_key, "--secret-stdin"], input=root.secret + "\n"
    )
    assert logged.exit_code == 0, logged.output
    stored = tmp_path / "credentials"
    assert stat.S_IMODE(os.stat(stored).st_mode) == 0o600
    assert json.loads(stored.read_text()) == {
        "access_key": root.access_key,
        "secret_key": root.secret,
    }
    # Without --access-key the CLI now speaks as the stored keypair.
    me = CliRunner().invoke(app, ["--api", cluster.api, "whoami", "--json"])
    assert json.loads(me.stdout) == {
        "access_key": root.access_key,
        "secret": True,
        "user": "admin",
        "revoked": False,
    }


def test_resource_groups_by_cli_superadmins_change_them_users_see_theirs(
    cluster: Tenanted,
) -> None:
    cluster.ok("admin", "domain", "create", "grp")
    for project in ("p1", "p2"):
        cluster.ok("admin", "project", "create", f"grp/{project}")
    keys = {}
    for user, project in (("gina", "p1"), ("hal", "p2")):
        cluster.ok("admin", "user", "create", user, "--domain", "grp", "--project", project)
        keys[user] = cluster.ok("admin", "keypair", "create", "--user", user)["access_key"]
    made = cluster.ok("admin", "group", "create", "gpu-a", "--queue", "drf", "--project", "grp/p1")
    assert made["applied"]
    cluster.ok("admin", "group", "update", "gpu-a", "--idle-timeout", "600")
    mine = {g["group"]: g for g in cluster.ok("admin", "group", "ls", key=keys["gina"])}
    assert mine["gpu-a"]["queue"] == "drf" and mine["gpu-a"]["idle_timeout_s"] == 600
    assert mine["gpu-a"]["projects"] == ["grp/p1"]
    assert "gpu-a" not in {g["group"] for g in cluster.ok("admin", "group", "ls", key=keys["hal"])}
    refused = cluster.run("admin", "group", "create", "mine", key=keys["gina"])
    assert refused.exit_code == 1
    assert refused.stderr == "error: refused (forbidden): user gina may not create group\n"
    create = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--group", "gpu-a", "--wait"]
    wrong = cluster.run(*create, "--json", "--", "true", key=keys["hal"])
    assert wrong.exit_code == 1
    [rejected] = json.loads(wrong.stdout)["sessions"]
    assert (rejected["group"], rejected["reason"]) == (
        "gpu-a",
        "no resource group gpu-a open to project grp/p2",
    )
    assert {a["group"] for a in cluster.ok("agents", "ls")["agents"]} == {"default"}
    cluster.ok("admin", "group", "rm", "gpu-a")
    assert "gpu-a" not in {g["group"] for g in cluster.ok("admin", "group", "ls")}


def test_a_domain_admin_allows_images_and_names_their_default_versions(
    cluster: Tenanted,
) -> None:
    for domain in ("imgs", "elsewhere"):
        cluster.ok("admin", "domain", "create", domain)
        cluster.ok("admin", "project", "create", f"{domain}/p")
    people = [("ida", "imgs", "domain-admin"), ("ivo", "imgs", "user")]
    people.append(("eli", "elsewhere", "domain-admin"))
    keys: dict[str, str] = {}
    for user, domain, role in people:
        made = ["admin", "user", "create", user, "--domain", domain, "--project", "p"]
        cluster.ok(*made, "--role", role)
        keys[user] = cluster.ok("admin", "keypair", "create", "--user", user)["access_key"]
    # A user, and another domain's admin, may not; the domain's admin may.
    allow = ["admin", "images", "allow", "imgs", "fgpu/busybox"]
    alias = ["admin", "images", "alias", "imgs", "bb", "fgpu/busybox:latest"]
    for who, role in (("ivo", "user"), ("eli", "domain-admin")):
        for args in (allow, alias):
            refused = cluster.run(*args, key=keys[who])
            assert refused.exit_code == 1
            what = "set images" if args is allow else "set image alias"
            assert refused.stderr == f"error: refused (forbidden): {role} {who} may not {what}\n"
    cluster.ok(*allow, key=keys["ida"])
    cluster.ok(*alias, key=keys["ida"])
    shown = {"domain": "imgs", "images": ["fgpu/busybox"], "aliases": {"bb": "fgpu/busybox:latest"}}
    assert cluster.ok("admin", "images", "ls", key=keys["ivo"]) == [shown]
    assert shown in cluster.ok("admin", "images", "ls")  # a superadmin sees every domain
    # Another domain's admin sees only its own domain's (none set: every image).
    theirs = cluster.ok("admin", "images", "ls", key=keys["eli"])
    assert theirs == [{"domain": "elsewhere", "images": None, "aliases": {}}]

    # `images ls` marks what the viewer's domain may run; another domain's is a
    # superadmin's to ask for (it would show that domain's allow-list).
    def allowed(key: str | None, *args: str) -> dict[str, bool | None]:
        listed = cluster.ok("images", "ls", *args, key=key)
        return {t["ref"]: t["allowed"] for i in listed for t in i["tags"]}

    marks = allowed(keys["ivo"])
    assert (marks["fgpu/busybox:latest"], marks["fgpu/python:bookworm"]) == (True, False)
    assert set(allowed(keys["eli"]).values()) == {True}  # no allow-list: every image
    assert allowed(None, "--domain", "imgs") == marks
    table = cluster.run("images", "ls", key=keys["ivo"])
    assert "ALLOWED" in table.stdout and "domain imgs" in table.stdout
    nosy = cluster.run("images", "ls", "--domain", "imgs", key=keys["eli"])
    assert nosy.exit_code == 1
    assert "only a superadmin may list images for domain imgs" in nosy.stderr
    # Ivo's request names the alias: it runs what the alias names; another image is refused.
    create = ["session", "create", "--fgpu", "0.5"]
    [ran] = cluster.ok(*create, "--image", "bb", "--wait", "--", "true", key=keys["ivo"])[
        "sessions"
    ]
    assert ran["image"] == "fgpu/busybox:latest" and ran["status"] in ("RUNNING", "TERMINATED")
    refused = cluster.run(
        *create, "--image", "fgpu/python:bookworm", "--wait", "--json", "--", "true",
        key=keys["ivo"],
    )  # fmt: skip
    assert refused.exit_code == 1
    [rejected] = json.loads(refused.stdout)["sessions"]
    assert rejected["reason"] == (
        "image fgpu/python:bookworm is not allowed in domain imgs (allowed: fgpu/busybox)"
    )
    # Without an allow-list, every image again.
    cluster.ok("admin", "images", "allow-all", "imgs", key=keys["ida"])
    again = cluster.ok(
        *create, "--image", "fgpu/python:bookworm", "--wait", "--", "true", key=keys["ivo"]
    )
    assert again["sessions"][0]["status"] in ("RUNNING", "TERMINATED")


def test_images_ls_shows_each_tag_and_the_agents_holding_it(cluster: Tenanted) -> None:
    images = {i["name"]: i for i in cluster.ok("images", "ls")}
    [latest] = images["fgpu/busybox"]["tags"]
    assert latest["tag"] == "latest" and latest["ref"] == "fgpu/busybox:latest"
    assert latest["agents"] == ["a1"] and latest["size"] > 0
    assert [i.startswith("sha256:") for i in latest["ids"]] == [True]
    assert latest["digests"] == []  # made here, never pushed or pulled
    assert images["fgpu/python"]["tags"][0]["ids"] != latest["ids"]
    table = cluster.run("images", "ls")
    assert table.exit_code == 0 and "fgpu/busybox" in table.stdout and "a1" in table.stdout
    # Only a signed-in key reads it.
    anonymous = CliRunner(env={"FGPU_SECRET_KEY": "wrong"}).invoke(
        app, ["--api", cluster.api, "--access-key", "AKnobody", "images", "ls"]
    )
    assert anonymous.exit_code != 0 and "images" not in anonymous.stdout


def test_presets_by_cli_a_domains_admin_defines_them_its_users_see_them(
    cluster: Tenanted,
) -> None:
    cluster.ok("admin", "domain", "create", "pre")
    cluster.ok("admin", "project", "create", "pre/p")
    keys: dict[str, str] = {}
    for user, role in (("pia", "domain-admin"), ("pat", "user")):
        cluster.ok(
            "admin", "user", "create", user, "--domain", "pre", "--project", "p", "--role", role
        )
        keys[user] = cluster.ok("admin", "keypair", "create", "--user", user)["access_key"]
    half = ["admin", "preset", "create", "half", "--fgpu", "0.5", "--cpu", "2", "--mem", "4g"]
    refused = cluster.run(*half, "--domain", "pre", key=keys["pat"])
    assert refused.exit_code == 1
    assert refused.stderr == "error: refused (forbidden): user pat may not create preset\n"
    everyone = cluster.run(*half, key=keys["pia"])  # every domain's: a superadmin's
    assert everyone.exit_code == 1 and "domain-admin pia may not create preset" in everyone.stderr
    assert cluster.ok(*half, "--domain", "pre", "--group", "default", key=keys["pia"])["applied"]
    cluster.ok("admin", "preset", "create", "cpu", "--cpu", "1", "--mem", "1g")
    assert cluster.run(*half[:-2], "--mem", "lots", key=keys["pia"]).exit_code == 2
    seen = cluster.ok("admin", "preset", "ls", key=keys["pat"])
    assert [(p["name"], p["domain"]) for p in seen] == [("cpu", None), ("half", "pre")]
    assert seen[1]["group"] == "default"
    assert seen[1]["slots"] == {"fgpu": "0.5", "cpu": "2", "mem": 4 << 30}
    text = cluster.run("admin", "preset", "ls", key=keys["pat"]).stdout
    assert "half (pre, group default): 0.5 fGPU, 2 CPU, 4G" in text, text
    cluster.ok("admin", "preset", "rm", "half", "--domain", "pre", key=keys["pia"])
    gone = cluster.run("admin", "preset", "rm", "half", "--domain", "pre", key=keys["pia"])
    assert gone.exit_code == 1 and "no preset half of domain pre" in gone.stderr
    assert [p["name"] for p in cluster.ok("admin", "preset", "ls", key=keys["pat"])] == ["cpu"]


def test_a_groups_fgpu_quantum_by_cli_refuses_a_finer_session(cluster: Tenanted) -> None:
    cluster.ok("admin", "group", "create", "tenths", "--fgpu-quantum", "0.1")
    shown = {g["group"]: g for g in cluster.ok("admin", "group", "ls")}
    assert shown["tenths"]["fgpu_quantum"] == "0.1"
    cluster.ok("admin", "group", "update", "tenths", "--idle-timeout", "60")  # quantum kept
    shown = {g["group"]: g for g in cluster.ok("admin", "group", "ls")}
    assert (shown["tenths"]["fgpu_quantum"], shown["tenths"]["idle_timeout_s"]) == ("0.1", 60)
    create = ["session", "create", "--image", IMAGE, "--group", "tenths", "--wait", "--json"]
    wrong = cluster.run(*create, "--fgpu", "0.55", "--", "true")
    assert wrong.exit_code == 1
    [rejected] = json.loads(wrong.stdout)["sessions"]
    assert rejected["reason"] == "resource group tenths gives fGPU in steps of 0.1; asked 0.55"
    cluster.ok("admin", "group", "update", "tenths", "--clear", "fgpu-quantum")
    shown = {g["group"]: g for g in cluster.ok("admin", "group", "ls")}
    assert shown["tenths"]["fgpu_quantum"] is None
    assert cluster.run("admin", "group", "update", "tenths", "--fgpu-quantum", "x").exit_code == 2
