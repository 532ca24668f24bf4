"""compose.yaml's deployment, as processes on this host: the server's secrets, a server
with authentication on, its gatekeeper, the administrator's set-up step, each actor with
its own service keypair, the read API; then a user made by the superadmin runs a session.
Nothing connects anonymously."""

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import pytest

from services.adapters import nats_server
from services.adapters.nats_auth import ServerAuth
from tests.support.cli_stack import FGPU, wait_for_line

pytestmark = pytest.mark.slow
IMAGE = "fgpu/busybox:latest"


@contextmanager
def _process(tmp: Path, name: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp / f"{name}.log"
    with open(log, "wb") as out:
        p = subprocess.Popen([FGPU, *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_line(log, "ready", p, 60)
        yield p
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def _fgpu(env: dict[str, str], *args: str) -> str:
    p = subprocess.run(
        [FGPU, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, f"fgpu {' '.join(args)}: {p.stderr}"
    return p.stdout


def test_a_deployment_of_separate_processes_with_authentication(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FGPU_")}
    env["FGPU_HOME"] = str(tmp_path / "home")
    _fgpu(env, "admin", "server-auth", "--dir", str(secrets))
    assert oct(os.stat(secrets / "auth.json").st_mode & 0o777) == "0o600"
    auth = ServerAuth.load(secrets)
    with nats_server.nats_server(config=auth.config()) as server, ExitStack() as stack:
        url = ["--nats", server.url]
        # The set-up step speaks as the server's static setup user: no gatekeeper yet.
        kinds = ["intake", "quota", "scheduler", "registrar", "domain-feed", "api", "agent:node1"]
        init = ["admin", "init", "--secrets", str(secrets), "--json"]
        for kind in kinds:
            init += ["--service", kind]
        root = json.loads(_fgpu(env, *url, *init))
        gate = ["gatekeeper", "--secrets", str(secrets)]
        stack.enter_context(_process(tmp_path, "gate", *url, *gate))
        keys = ["--service-keys", str(secrets / "services.json")]
        for name in ("intake", "registrar", "quota", "scheduler", "domain-feed"):
            stack.enter_context(_process(tmp_path, name, *url, *keys, name))
        # A second scheduler and quota actor, each with a cursor on the log of its own.
        for name in ("quota", "scheduler"):
            second = [name, "--durable", f"{name}-2"]
            stack.enter_context(_process(tmp_path, f"{name}-2", *url, *keys, *second))
        agent = ["agent", "--agent-id", "node1", "--mock-gpus", "1", "--runtime", "dummy"]
        stack.enter_context(_process(tmp_path, "agent", *url, *keys, *agent, "--no-shim"))
        api_log = tmp_path / "api.log"
        stack.enter_context(_process(tmp_path, "api", *url, *keys, "api", "--port", "0"))
        api = next(w for w in api_log.read_text().split() if w.startswith("http"))
        as_root = {
            **env,
            "FGPU_ACCESS_KEY": root["access_key"],
            "FGPU_SECRET_KEY": root["secret_key"],
        }
        base = [*url, "--api", api.removesuffix("/v1")]
        _fgpu(
            as_root,
            *base,
            "admin",
            "user",
            "create",
            "ana",
            "--domain",
            "default",
            "--project",
            "default",
        )
        made = json.loads(
            _fgpu(as_root, *base, "admin", "keypair", "create", "--user", "ana", "--json")
        )
        as_ana = {
            **env,
            "FGPU_ACCESS_KEY": made["access_key"],
            "FGPU_SECRET_KEY": made["secret_key"],
        }
        create = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--wait", "--json"]
        [session] = json.loads(_fgpu(as_ana, *base, *create, "--", "true"))["sessions"]
        assert session["status"] in ("RUNNING", "TERMINATED") and session["user"] == "ana"
        assert anyio.run(_durables, server.url, secrets / "services.json") >= {
            "quota",
            "quota-2",
            "scheduler",
            "scheduler-2",
        }
        # The same set-up step again changes nothing, and makes no second superadmin.
        again = _fgpu(env, *url, "admin", "init", "--secrets", str(secrets))
        assert "no superadmin was made" in again


async def _durables(url: str, keys: Path) -> set[str]:
    """The durable consumers of the stream, each as its kind's keypair sees them (a
    keypair may look at its kind's alone)."""
    import nats

    from services.cli.identities import kept_service_key
    from services.domain.access.permissions import durables

    names = set()
    for kind in ("quota", "scheduler", "registrar"):
        me = kept_service_key(keys, kind)
        nc = await nats.connect(url, **me.options())
        try:
            js = nc.jetstream()
            for name in durables(kind):
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    names.add((await js.consumer_info("FGPU", name)).name)
        finally:
            await nc.close()
    return names


def _until_ok(env: dict[str, str], *args: str, within_s: float = 60) -> str:
    """``fgpu ARGS`` until it succeeds: a new cluster elects its JetStream leader first."""
    deadline = time.monotonic() + within_s
    while True:
        p = subprocess.run(
            [FGPU, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if p.returncode == 0:
            return p.stdout
        assert time.monotonic() < deadline, f"fgpu {' '.join(args)}: {p.stderr}"
        time.sleep(1)


def test_a_clustered_deployment_with_authentication_survives_a_server(tmp_path: Path) -> None:
    """docs/deploy.md's cluster: three servers routed together, each with the same auth
    part; the stream and the snapshot buckets with three replicas; the gatekeeper and every
    actor given all three addresses, each with its own keypair. A user's session runs;
    one server is killed (SIGKILL); the next session still runs, through the others."""
    secrets = tmp_path / "secrets"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FGPU_")}
    env["FGPU_HOME"] = str(tmp_path / "home")
    _fgpu(env, "admin", "server-auth", "--dir", str(secrets))
    auth = ServerAuth.load(secrets)
    with nats_server.nats_cluster(3, config=auth.config()) as servers, ExitStack() as stack:
        url = ["--nats", ",".join(s.url for s in servers.values())]
        kinds = ["intake", "quota", "scheduler", "registrar", "domain-feed", "api", "agent:node1"]
        init = ["admin", "init", "--secrets", str(secrets), "--replicas", "3", "--json"]
        for kind in kinds:
            init += ["--service", kind]
        root = json.loads(_until_ok(env, *url, *init))
        stack.enter_context(
            _process(tmp_path, "gate", *url, "gatekeeper", "--secrets", str(secrets))
        )
        keys = ["--service-keys", str(secrets / "services.json")]
        for name in ("intake", "registrar", "quota", "scheduler", "domain-feed"):
            stack.enter_context(_process(tmp_path, name, *url, *keys, name))
        agent = ["agent", "--agent-id", "node1", "--mock-gpus", "1", "--runtime", "dummy"]
        stack.enter_context(_process(tmp_path, "agent", *url, *keys, *agent, "--no-shim"))
        stack.enter_context(_process(tmp_path, "api", *url, *keys, "api", "--port", "0"))
        api = next(w for w in (tmp_path / "api.log").read_text().split() if w.startswith("http"))
        as_root = {
            **env,
            "FGPU_ACCESS_KEY": root["access_key"],
            "FGPU_SECRET_KEY": root["secret_key"],
        }
        base = [*url, "--api", api.removesuffix("/v1")]
        user = ["admin", "user", "create", "ana", "--domain", "default", "--project", "default"]
        _fgpu(as_root, *base, *user)
        made = json.loads(
            _fgpu(as_root, *base, "admin", "keypair", "create", "--user", "ana", "--json")
        )
        as_ana = {
            **env,
            "FGPU_ACCESS_KEY": made["access_key"],
            "FGPU_SECRET_KEY": made["secret_key"],
        }
        create = ["session", "create", "--image", IMAGE, "--fgpu", "0.25", "--wait", "--json"]
        [first] = json.loads(_fgpu(as_ana, *base, *create, "--", "sleep", "600"))["sessions"]
        assert first["status"] == "RUNNING" and first["user"] == "ana"
        servers["n0"].process.kill()  # SIGKILL: no goodbye to its clients or routes
        servers["n0"].process.wait(10)
        [second] = json.loads(
            _until_ok(as_ana, *base, *create, "--timeout", "60", "--", "sleep", "600")
        )["sessions"]
        assert second["status"] == "RUNNING" and second["id"] != first["id"]
