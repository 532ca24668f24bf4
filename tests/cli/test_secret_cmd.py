"""``fgpu secret set|rm|ls`` and a pipeline referring to a secret, against a real server
with tenancy, the actors (the pipeline actor among them, the agent holding the cluster's
secrets key) and the read API: the value goes in through standard input only, sealed;
its owner alone lists it; another's reference, removal or listing reaches nothing of
it; a revoked key sets nothing; a task gets the value in its environment; an endpoint
names its owner's secret, and another user's naming it is refused."""

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from services.adapters.jetstream import connect
from services.adapters.sealed_box import SealedBoxKey
from services.cli.api_client import ApiError, ReadApi
from tests.support.tenanted_cli import Tenanted, tenanted

KEY = SealedBoxKey.generate()
VALUE = "tok-3f9a1c5e7b2d-never-logged"
PIPELINE = """
name: uses-secret
environment: {CODE: {secret: code}}
tasks:
  - name: a
    image: fgpu/busybox:latest
    command: exit $CODE
    resources: {cpu: "0.1", mem: 64m}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenanted]:
    with tenanted(tmp_path_factory.mktemp("secrets"), KEY) as found:
        found.ok("admin", "domain", "create", "lab")
        found.ok("admin", "project", "create", "lab/nlp")
        yield found


def _user(cluster: Tenanted, name: str) -> str:
    cluster.ok("admin", "user", "create", name, "--domain", "lab", "--project", "nlp")
    key: str = cluster.ok("admin", "keypair", "create", "--user", name)["access_key"]
    return key


def _names(cluster: Tenanted, key: str) -> list[tuple[str, int]]:
    return [(s["name"], s["version"]) for s in cluster.ok("secret", "ls", key=key)["secrets"]]


def _until(cluster: Tenanted, key: str, want: list[tuple[str, int]]) -> None:
    """Wait until ``key``'s list is ``want`` (looked at again after each event)."""
    api = _api(cluster, key)
    for _ in api.stream(0, deadline=time.monotonic() + 30):
        shown = api.get("/v1/secrets")["secrets"]
        if [(s["name"], s["version"]) for s in shown] == want:
            return
    raise AssertionError(f"{key}'s secrets are {_names(cluster, key)}, not {want}")


def test_a_value_given_as_an_argument_is_refused_and_nothing_is_set(cluster: Tenanted) -> None:
    ana = _user(cluster, "ana")
    result = cluster.run("secret", "set", "hf", VALUE, key=ana)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: a secret's value is never an argument")
    assert result.stderr.count("\n") == 1 and VALUE not in result.stderr
    assert _names(cluster, ana) == []


def test_the_owner_alone_lists_and_removes_and_the_value_is_only_sealed(
    cluster: Tenanted,
) -> None:
    ana, ben = _user(cluster, "ana2"), _user(cluster, "ben2")
    result = cluster.run("secret", "set", "hf", key=ana, stdin=VALUE + "\n")
    assert result.exit_code == 0, result.output
    _until(cluster, ana, [("hf", 1)])
    assert _names(cluster, ben) == [] and _names(cluster, cluster.root.access_key) == []
    assert cluster.run("secret", "rm", "hf", key=ben).exit_code == 0  # ben's own: none
    _until(cluster, ben, [])
    assert _names(cluster, ana) == [("hf", 1)]
    log = _log(cluster)
    assert b"secret.set.v1" in log and b"secret.removed.v1" in log
    for form in (VALUE.encode(), base64.b64encode(VALUE.encode())):
        assert form not in log
    assert cluster.run("secret", "rm", "hf", key=ana).exit_code == 0
    _until(cluster, ana, [])


def test_a_revoked_key_sets_nothing(cluster: Tenanted) -> None:
    eve = _user(cluster, "eve")
    cluster.ok("admin", "keypair", "revoke", eve)
    result = cluster.run("secret", "set", "hf", key=eve, stdin=VALUE)
    assert result.exit_code != 0 and result.stderr.count("\n") == 1, result.output
    sets = [m for m in _log(cluster).split(b"\n") if b'"secret.set.v1"' in m]
    assert not [m for m in sets if eve.encode() in m]


def test_a_pipeline_task_gets_its_owners_secret_and_another_user_is_refused(
    cluster: Tenanted, tmp_path: Path
) -> None:
    """The task exits with the secret's value (7): the agent put it in its environment.
    The same file run by another user, who has no such secret, is named by validate and
    refused at admission."""
    ana, ben = _user(cluster, "ana3"), _user(cluster, "ben3")
    doc = tmp_path / "p.yaml"
    doc.write_text(PIPELINE)
    said = cluster.run("pipeline", "validate", str(doc), key=ana)
    assert said.exit_code == 2
    assert (
        said.stderr == "error: environment.CODE: no secret code of yours (fgpu secret set code)\n"
    )
    assert cluster.run("secret", "set", "code", key=ana, stdin="7").exit_code == 0
    _until(cluster, ana, [("code", 1)])
    assert cluster.run("pipeline", "validate", str(doc), key=ana).exit_code == 0
    mine = _ended(cluster, cluster.ok("pipeline", "run", str(doc), key=ana)["run_id"], ana)
    assert (mine["tasks"][0]["status"], mine["tasks"][0]["exit_code"]) == ("failed", 7), mine[
        "tasks"
    ][0]["reason"]
    theirs = _ended(cluster, cluster.ok("pipeline", "run", str(doc), key=ben)["run_id"], ben)
    assert theirs["tasks"][0]["reason"] == f"no secret code of {ben}'s (fgpu secret set code)"


def _ended(cluster: Tenanted, run_id: str, key: str) -> dict[str, Any]:
    api = _api(cluster, key)
    for _ in api.stream(0, deadline=time.monotonic() + 60):
        try:
            shown: dict[str, Any] = api.get(f"/v1/pipelines/{run_id}")
        except ApiError as e:  # not projected yet
            assert e.status == 404, e
            continue
        if shown["status"] not in ("running", "cancelling"):
            return shown
    raise AssertionError(
        f"run {run_id} did not end: {cluster.ok('pipeline', 'info', run_id, key=key)}"
    )


def _api(cluster: Tenanted, key: str) -> ReadApi:
    """The read API as ``key`` reads it."""
    return ReadApi(cluster.api, access_key=key, secret=cluster.secrets[key])


def _log(cluster: Tenanted) -> bytes:
    """Every message of the log, its bytes end to end (read from the stream itself)."""

    async def read() -> bytes:
        events = await connect(cluster.nats, name="test-secrets-scan")
        try:
            return b"\n".join([p async for batch in events.read_raw(0) for p in batch.payloads])
        finally:
            await events.close()

    return anyio.run(read)


def test_a_session_refers_to_a_secret_by_name_and_one_its_owner_lacks_is_rejected(
    cluster: Tenanted,
) -> None:
    ana = _user(cluster, "ana4")
    create = ("session", "create", "--image", "fgpu/busybox:latest", "--cpu-only")
    bad = cluster.run(*create, "--secret", "HF", "--", "true", key=ana)
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --secret 'HF': give VARIABLE=NAME")
    [sid] = cluster.ok(*create, "--secret", "HF=hf", "--", "true", key=ana)["sessions"]
    api = _api(cluster, ana)
    for _ in api.stream(0, deadline=time.monotonic() + 30):
        try:
            shown: dict[str, Any] = api.get(f"/v1/sessions/{sid}")
        except ApiError:
            continue
        if shown["status"] == "REJECTED":
            assert shown["reason"] == f"no secret hf of {ana}'s (fgpu secret set hf)"
            return
    raise AssertionError(f"session {sid} was not rejected")


def test_an_endpoint_names_its_owners_secret_and_another_users_is_refused(
    cluster: Tenanted,
) -> None:
    """``fgpu serve create --secret``: the owner's secret by name, shown by name; another
    user naming it (a secret that user lacks) is refused with the reason."""
    ana, ben = _user(cluster, "ana9"), _user(cluster, "ben9")
    assert cluster.run("secret", "set", "hf", key=ana, stdin=VALUE).exit_code == 0
    _until(cluster, ana, [("hf", 1)])
    serve = ("serve", "create", "--image", "fgpu/busybox:latest", "--cpu-only", "--cpu", "0.1")
    made = cluster.ok(*serve, "hfed", "--secret", "HF_TOKEN=hf", "--", "sleep", "1", key=ana)
    [revision] = cluster.ok("serve", "info", made["id"], key=ana)["revisions"]
    assert revision["secrets"] == [{"variable": "HF_TOKEN", "secret": "hf"}]
    assert revision["env"] == []
    theirs = cluster.run(*serve, "bens", "--secret", "HF_TOKEN=hf", key=ben)
    assert theirs.exit_code == 1
    assert f"no secret hf of {ben}'s (fgpu secret set hf)" in theirs.stderr
    bad = cluster.run(*serve, "anas", "--secret", "HF_TOKEN", key=ana)
    assert bad.exit_code == 2 and "--secret 'HF_TOKEN': give VARIABLE=NAME" in bad.stderr
    assert VALUE.encode() not in _log(cluster)
