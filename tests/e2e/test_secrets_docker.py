"""Secrets through `fgpu up` on a real NATS server and Docker engine: the store's secrets
key made once (0600) and its public half on the log; a value handed in on standard
input, through the intake; a container has it in its environment, compared inside; the
other user lists nothing and its reference to it is rejected; the value is in no message
of the log, no file of the store's projections, no line of fgpu up's output."""

import hashlib
import json
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_stack import FGPU, fgpu_up
from tests.support.docker_env import require_docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]
VALUE = "s3cr3t with spaces & $igns"
CREATE = ("session", "create", "--image", "fgpu/busybox:latest", "--cpu-only", "--cpu", "0.1")


def test_a_session_gets_its_owners_secret_through_fgpu_up(tmp_path: Path) -> None:
    require_docker()
    home = tmp_path / "home"
    with fgpu_up(home, "--no-serve", users=("researcher", "mallory")) as stack:
        given = subprocess.run(
            [FGPU, "secret", "set", "hf"],
            input=VALUE,
            env=stack.command_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert given.returncode == 0, given.stderr
        # Compared by its digest: the command is on the log, the value must not be.
        digest = hashlib.sha256(VALUE.encode()).hexdigest()
        check = f'test "$(printf %s "$T" | sha256sum | cut -d" " -f1)" = {digest} && sleep 3600'
        [mine] = stack.json(
            *CREATE, "--mem", "64m", "--secret", "T=hf", "--wait", "--", "sh", "-c", check
        )["sessions"]
        assert mine["status"] == "RUNNING", mine  # else its test failed: it exited
        assert stack.json("secret", "ls", key="mallory") == {"secrets": []}
        theirs = stack.run(
            *CREATE,
            "--mem",
            "64m",
            "--secret",
            "T=hf",
            "--wait",
            "--json",
            "--",
            "true",
            key="mallory",
        )
        assert theirs.returncode == 1, theirs.stderr
        [refused] = json.loads(theirs.stdout)["sessions"]
        assert refused["status"] == "REJECTED" and refused["reason"].startswith("no secret hf of")
        stack.fgpu("session", "rm", mine["id"])
    key = next(home.rglob("secrets.key"))
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for path in home.rglob("*"):
        if path.is_file() and path != key:
            assert VALUE.encode() not in path.read_bytes(), path
