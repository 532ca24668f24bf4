"""``fgpu serve`` against a cluster with tenancy: each change is the user's request,
answered by the serving actor; reads show a user its own endpoints alone."""

import json
from collections.abc import Iterator

import pytest

from tests.support.tenanted_cli import Tenanted, tenanted

IMAGE = "fgpu/busybox:latest"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenanted]:
    with tenanted(tmp_path_factory.mktemp("serve")) as found:
        yield found


def _people(cluster: Tenanted) -> tuple[str, str]:
    cluster.ok("admin", "domain", "create", "lab")
    cluster.ok("admin", "project", "create", "lab/nlp")
    keys = []
    for name in ("ana", "ben"):
        cluster.ok("admin", "user", "create", name, "--domain", "lab", "--project", "nlp")
        keys.append(cluster.ok("admin", "keypair", "create", "--user", name)["access_key"])
    return keys[0], keys[1]


def test_a_user_serves_scales_updates_rolls_back_and_removes_an_endpoint(
    cluster: Tenanted,
) -> None:
    ana, ben = _people(cluster)
    made = cluster.ok(
        "serve",
        "create",
        "sent",
        "--image",
        IMAGE,
        "--fgpu",
        "0.25",
        "--replicas",
        "2",
        "--env",
        "MODEL=tiny",
        "--",
        "sleep",
        "3600",
        key=ana,
    )
    assert made["applied"] and made["id"].startswith("ep-")
    [ep] = cluster.ok("serve", "ls", key=ana)["endpoints"]
    assert (ep["name"], ep["owner"], ep["project"], ep["path"]) == ("sent", ana, "nlp", "/e/sent/")
    assert ep["revisions"][0]["env"] == ["MODEL"]  # names only: values may be secrets
    cluster.ok("serve", "scale", "sent", "3", key=ana)
    cluster.ok("serve", "update", "sent", "--image", IMAGE, "--fgpu", "0.5", "--at-once", key=ana)
    assert cluster.ok("serve", "info", "sent", key=ana)["targets"] == [
        {"revision": 2, "replicas": 3, "traffic": 100}
    ]
    cluster.ok("serve", "rollback", "sent", "--at-once", key=ana)  # to the one before
    assert cluster.ok("serve", "info", made["id"], key=ana)["targets"][0]["revision"] == 1
    # A rolling update: no replica here is ever healthy (no router), so the old ones,
    # not serving, give way at once and the rollout ends in one step.
    rolled = cluster.ok("serve", "update", "sent", "--image", IMAGE, "--fgpu", "0.25", key=ana)
    assert rolled["revision"] == 3
    seen = cluster.ok("serve", "info", "sent", key=ana)
    assert seen["rollout"] is None
    assert seen["targets"] == [{"revision": 3, "replicas": 3, "traffic": 100}]
    cluster.ok("serve", "traffic", "sent", "1=90", "3=10", key=ana)
    seen = cluster.ok("serve", "info", "sent", key=ana)
    assert seen["targets"] == [
        {"revision": 1, "replicas": 3, "traffic": 90},
        {"revision": 3, "replicas": 3, "traffic": 10},
    ]
    assert [r["traffic"] for r in seen["revisions"]] == [90, 0, 10]
    bad = cluster.run("serve", "traffic", "sent", "1=90", "3=20", key=ana)
    assert bad.exit_code == 1 and "sum to 100" in bad.stderr
    token = cluster.ok("serve", "token", "create", "sent", "--days", "1", key=ana)
    assert token["token"].startswith("fgt_")
    [seen] = cluster.ok("serve", "info", "sent", key=ana)["tokens"]
    assert seen["token_id"] == token["token_id"] and not seen["revoked"]
    assert token["token"] not in json.dumps(cluster.ok("serve", "info", "sent", key=ana))
    cluster.ok("serve", "token", "revoke", "sent", token["token_id"], key=ana)
    assert cluster.ok("serve", "info", "sent", key=ana)["tokens"][0]["revoked"]
    # Another user of the same project sees nothing of it and changes nothing.
    assert cluster.ok("serve", "ls", key=ben)["endpoints"] == []
    for args in (
        ("info", "sent"),
        ("scale", "sent", "9"),
        ("token", "create", "sent"),
        ("update", "sent", "--image", IMAGE, "--fgpu", "0.25"),
        ("rollback", "sent", "--to", "1"),
        ("traffic", "sent", "1=100"),
    ):
        refused = cluster.run("serve", *args, key=ben)
        assert refused.exit_code == 2
        assert refused.stderr == "error: no endpoint 'sent' of yours\n"
    taken = cluster.run("serve", "create", "sent", "--image", IMAGE, "--fgpu", "0.25", key=ben)
    assert taken.exit_code == 1
    assert taken.stderr == "error: refused (conflict): an endpoint named sent exists\n"
    cluster.ok("serve", "rm", "sent", key=ana)
    assert cluster.ok("serve", "ls", key=ana)["endpoints"] == []


def test_an_owner_sets_an_autoscaling_rule_shown_by_info_and_a_bad_one_is_one_line(
    cluster: Tenanted,
) -> None:
    cluster.ok("admin", "domain", "create", "ops")
    cluster.ok("admin", "project", "create", "ops/web")
    keys = []
    for name in ("cai", "dee"):
        cluster.ok("admin", "user", "create", name, "--domain", "ops", "--project", "web")
        keys.append(cluster.ok("admin", "keypair", "create", "--user", name)["access_key"])
    ana, ben = keys
    cluster.ok("serve", "create", "auto", "--image", IMAGE, "--fgpu", "0.25", key=ana)
    rule = ("--metric", "rps_per_replica", "--up", "20", "--down", "5", "--min", "0")
    cluster.ok("serve", "autoscale", "auto", *rule, "--max", "4", "--cooldown", "30", key=ana)
    shown = cluster.ok("serve", "info", "auto", key=ana)["autoscale"]
    assert (shown["metric"], shown["min_replicas"], shown["max_replicas"]) == (
        "rps_per_replica",
        0,
        4,
    )
    assert cluster.ok("serve", "ls", key=ana)["endpoints"][0]["autoscale"] == shown
    bad = cluster.run("serve", "autoscale", "auto", *rule, "--max", "0", key=ana)
    assert (bad.exit_code, bad.stderr) == (
        2,
        "error: autoscaling wants 0 <= min <= max <= 64 and max >= 1\n",
    )
    odd = ("--metric", "fast", "--up", "1", "--down", "0", "--max", "2")
    bad = cluster.run("serve", "autoscale", "auto", *odd, key=ana)
    assert (bad.exit_code, bad.stderr) == (
        2,
        "error: --metric 'fast': one of rps_per_replica, in_flight, p95_ms\n",
    )
    refused = cluster.run("serve", "autoscale", "auto", "--off", key=ben)
    assert (refused.exit_code, refused.stderr) == (2, "error: no endpoint 'auto' of yours\n")
    cluster.ok("serve", "autoscale", "auto", "--off", key=ana)
    assert cluster.ok("serve", "info", "auto", key=ana)["autoscale"] is None
