"""Every problem of the environment a command runs in is one line on stderr saying what to
do, and exit 1 (2: input no command could use), never a traceback: a home it cannot
write, no Docker engine, a port in use, a wrong NATS URL, a revoked keypair or a wrong
secret, an expired token, an image nobody has. On one `fgpu up` (dummy runtime: no Docker
needed; the engine that is missing is missing on purpose)."""

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.adapters.nats_server import free_port
from tests.support.cli_stack import FGPU, Stack, fgpu_up

UP = ["up", "--mock-gpus", "1", "--no-shim"]
CREATE = ["session", "create", "--image", "fgpu/busybox:latest", "--fgpu", "0.5"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("env") / "home"
    with fgpu_up(home, "--runtime", "dummy", "--no-shim", keep_containers=True) as up:
        yield up


def _run(*args: str, env: dict[str, str], stdin: str | None = None) -> tuple[int, str]:
    """``fgpu ARGS``: its exit code and the one line it wrote on stderr."""
    p = subprocess.run(
        [FGPU, *args], env=env, input=stdin, capture_output=True, text=True, timeout=90
    )
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return p.returncode, lines[0]


def _env(home: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FGPU_")}
    return {**env, "FGPU_HOME": str(home), **more}


def _url(stack: Stack, key: str) -> str:
    return str(json.loads((stack.home / "up.json").read_text())[key])


def test_a_home_it_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")  # a home beneath a file: unwritable, even for root
    env = _env(tmp_path / "file" / "home")
    for args, stdin in (
        (UP, None),
        (["agent", "--mock-gpus", "1", "--runtime", "dummy", "--no-shim"], None),
        (["login", "--access-key", "AK1", "--secret-stdin"], "s3cret\n"),
    ):
        code, line = _run(*args, env=env, stdin=stdin)
        assert code == 1, line
        assert f"{tmp_path / 'file'}" in line and "set FGPU_HOME to a directory" in line, line


def test_no_docker_engine(tmp_path: Path) -> None:
    env = _env(tmp_path / "home", DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    agent = ["--nats", "nats://127.0.0.1:1", "agent", "--mock-gpus", "1", "--no-shim"]
    for args in (UP, agent):
        code, line = _run(*args, env=env)
        assert code == 1, line
        assert line.startswith(f"error: no Docker engine answers at unix://{tmp_path}"), line


def test_a_port_in_use(stack: Stack, tmp_path: Path) -> None:
    nats_port = _url(stack, "nats_url").rsplit(":", 1)[1]
    api_port = _url(stack, "api_url").rsplit(":", 1)[1]
    serve_port = _url(stack, "serve_url").rsplit(":", 1)[1]
    ports = (("--port", nats_port), ("--api-port", api_port), ("--serve-port", serve_port))
    for option, port in ports:
        env = _env(tmp_path / option.strip("-"))
        code, line = _run(*UP, "--runtime", "dummy", option, port, env=env)
        assert code == 1, line
        assert f"{port} is in use" in line or f"{port}: another process does" in line, line
        assert f"give another {option}" in line, line
    assert stack.agent_id in stack.fgpu("agents", "ls", key="admin")  # it never noticed


def test_a_wrong_nats_url(stack: Stack) -> None:
    nobody = f"nats://127.0.0.1:{free_port()}"
    agent = ["agent", "--mock-gpus", "1", "--runtime", "dummy", "--no-shim"]
    for args in (CREATE, agent):
        code, line = _run("--nats", nobody, *args, env=stack.command_env())
        assert code == 1, line
        assert f"cannot connect to NATS at {nobody}" in line and "--nats" in line, line
    # The read API's address where the bus's goes: input no command could use.
    code, line = _run("--nats", _url(stack, "api_url"), *CREATE, env=stack.command_env())
    assert code == 2 and "is no NATS URL" in line and "--api" in line, line


def test_a_revoked_keypair_or_a_wrong_secret(stack: Stack) -> None:
    stack.user("gone")
    key = stack.keys["gone"]["FGPU_ACCESS_KEY"]
    stack.fgpu("admin", "keypair", "revoke", key, key="admin")
    revoked = stack.command_env("gone")
    code, line = _run(*CREATE, env=revoked)
    assert code == 1 and f"refused access key {key}" in line and "fgpu login" in line, line
    code, line = _run("session", "ls", env=revoked)
    assert code == 1 and "unknown or revoked" in line, line
    # Its own user: wrong secrets lock a key out for a while.
    stack.user("guesser")
    wrong = {**stack.command_env("guesser"), "FGPU_SECRET_KEY": "not-the-secret"}
    guesser = stack.keys["guesser"]["FGPU_ACCESS_KEY"]
    for _ in range(2):  # the refusal, however the server's closing of it reaches us
        code, line = _run(*CREATE, env=wrong)
        assert code == 1 and f"refused access key {guesser}" in line, line


def test_an_expired_token(stack: Stack) -> None:
    """A token the API no longer takes: the keypair signs in again where it can, else one
    line saying how."""
    researcher = stack.keys["researcher"]["FGPU_ACCESS_KEY"]
    stack.fgpu("session", "ls")
    tokens = stack.home / "api-tokens.json"
    kept = json.loads(tokens.read_text())
    entry = f"{_url(stack, 'api_url')} {researcher}"
    # Signed by nobody, expired an hour ago; the cache still thinks it good.
    forged = f"fgpu1.{researcher}.{int(time.time()) - 3600}.forged"
    tokens.write_text(json.dumps({**kept, entry: {"token": forged, "expires": 4e9}}))
    stack.fgpu("session", "ls")  # signed in again
    assert json.loads(tokens.read_text())[entry]["token"] != forged
    tokens.write_text(json.dumps({**kept, entry: {"token": forged, "expires": 4e9}}))
    no_secret = {k: v for k, v in stack.command_env().items() if k != "FGPU_SECRET_KEY"}
    code, line = _run("session", "ls", env=no_secret)
    assert code == 1 and "fgpu login" in line, line


def test_an_image_nobody_has(stack: Stack) -> None:
    create = ["session", "create", "--image", "fgpu/nobody-has:1", "--fgpu", "0.5", "--wait"]
    code, line = _run(*create, env=stack.command_env())
    assert code == 1, line
    assert "'fgpu/nobody-has:1' is not available on any agent" in line, line
