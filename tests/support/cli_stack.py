"""`fgpu up` in a subprocess, and the `fgpu` command run against it, for end-to-end tests."""

import json
import os
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FGPU = str(Path(sys.executable).parent / "fgpu")


class Stack:
    """``fgpu up`` running, and the users made on it: commands run as ``researcher`` unless
    another user is named (``key=``); ``admin`` is the superadmin ``fgpu up`` made."""

    def __init__(self, home: Path, agent_id: str) -> None:
        self.home = home
        self.agent_id = agent_id
        self.process: subprocess.Popen[bytes] | None = None  # fgpu up
        env = {k: v for k, v in os.environ.items() if not k.startswith("FGPU_")}
        self.env = {**env, "FGPU_HOME": str(home)}
        self.keys: dict[str, dict[str, str]] = {}

    def user(self, name: str) -> None:
        """A user ``name`` of the default project, with a keypair (made by the admin)."""
        admin = ["admin", "user", "create", name, "--domain", "default", "--project", "default"]
        self.fgpu(*admin, key="admin")
        made = self.json("admin", "keypair", "create", "--user", name, key="admin")
        self.keys[name] = {
            "FGPU_ACCESS_KEY": made["access_key"],
            "FGPU_SECRET_KEY": made["secret_key"],
        }

    def _env(self, key: str | None) -> dict[str, str]:
        name = key or "researcher"
        return self.env if name == "admin" else {**self.env, **self.keys[name]}

    def fgpu(self, *args: str, check: bool = True, key: str | None = None) -> str:
        env = self._env(key)
        p = subprocess.run(
            [FGPU, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if check and p.returncode != 0:
            raise AssertionError(f"fgpu {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
        return p.stdout + (p.stderr if not check else "")

    def json(self, *args: str, key: str | None = None) -> Any:
        """The JSON output of a read command (``--json`` goes before a ``--``)."""
        i = args.index("--") if "--" in args else len(args)
        return json.loads(self.fgpu(*args[:i], "--json", *args[i:], key=key))

    def command_env(self, key: str | None = None) -> dict[str, str]:
        """The environment ``fgpu`` runs in as ``key``'s user (default: the researcher)."""
        return self._env(key)

    def popen(self, *args: str, key: str | None = None, **kw: Any) -> subprocess.Popen[bytes]:
        """``fgpu ARGS`` started, as ``key``'s user; ``kw`` as Popen's."""
        return subprocess.Popen([FGPU, *args], env=self._env(key), **kw)

    def run(self, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        env = self._env(key)
        return subprocess.run(
            [FGPU, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )


def wait_for_line(
    path: Path, text: str, process: subprocess.Popen[bytes], deadline_s: float
) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise AssertionError(f"process exited {process.returncode}:\n{path.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} within {deadline_s} s:\n{path.read_text()}")


def exposed(home: Path, others: dict[str, str]) -> list[str]:
    """What under ``home`` its user's group or anyone else may read, write or enter (as
    ``path mode``), but the subtrees ``others`` names (relative path -> whose they are)."""
    found = []
    for top, dirs, files in os.walk(home):
        dirs[:] = [d for d in dirs if str((Path(top) / d).relative_to(home)) not in others]
        for name in [*dirs, *files]:
            path = Path(top) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                continue  # a link's own mode means nothing
            if mode & 0o077 and str(path.relative_to(home)) not in others:
                found.append(f"{path.relative_to(home)} {oct(mode & 0o777)}")
    return found


def docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=60, check=True
    ).stdout


def remove_agent_containers(agent_id: str) -> None:
    ids = docker("ps", "-aq", "--filter", f"label=fgpu.agent={agent_id}").split()
    if ids:
        # Some may be being removed by the agent right now: that is fine too.
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=60, check=False)


@contextmanager
def fgpu_up(
    home: Path,
    *extra: str,
    users: tuple[str, ...] = ("researcher",),
    agent_id: str | None = None,
    keep_containers: bool = False,
) -> Iterator[Stack]:
    """`fgpu up` with one mock GPU worth 2 fGPU, its store in ``home`` (a new one unless
    ``home`` has one), on Docker; and ``users`` of its default project. Its containers are
    removed after, unless ``keep_containers`` (for a restart)."""
    stack = Stack(home, agent_id or "e2e" + secrets.token_hex(3))
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = home / "up.log"
    with open(log, "wb", opener=lambda path, flags: os.open(path, flags, 0o600)) as out:
        process = subprocess.Popen(
            [
                FGPU,
                "up",
                "--agent-id",
                stack.agent_id,
                "--mock-gpus",
                "1",
                "--gpu-mem",
                "16g",
                "--fgpu-per-gpu",
                "2",
                "--cpu",
                "4",
                "--mem",
                "8g",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=stack.env,
        )
    stack.process = process
    try:
        wait_for_line(log, "ready", process, 60)
        for name in users:
            stack.user(name)
        yield stack
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        if not keep_containers:
            remove_agent_containers(stack.agent_id)
