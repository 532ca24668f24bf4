"""A default never loses data: `fgpu up` keeps its log in $FGPU_HOME, a restart resumes
the same history and re-adopts the containers still running, one store has one `fgpu up`,
and its nats-server never outlives it. Real processes, real Docker."""

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_stack import FGPU, docker, fgpu_up, remove_agent_containers
from docker_env import require_docker

from services.adapters import nats_server

pytestmark = pytest.mark.docker
IMAGE = "fgpu/busybox:latest"


def _gone(pid: int, within_s: float) -> bool:
    """Whether process ``pid`` has exited (a zombie counts) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _events(jsonl: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in jsonl.splitlines() if line.strip()]


def test_a_restart_with_default_options_resumes_the_history_and_its_containers(
    tmp_path: Path,
) -> None:
    require_docker()
    home, agent = tmp_path / "home", "dur" + secrets.token_hex(3)
    try:
        with fgpu_up(home, agent_id=agent, users=(), keep_containers=True) as up:
            create = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--wait"]
            [made] = up.json(*create, "--", "sleep", "3600", key="admin")["sessions"]
            assert made["status"] == "RUNNING"
            history = _events(up.fgpu("events", "--json", key="admin"))
        assert (home / "store" / "jetstream").is_dir()
        with fgpu_up(home, agent_id=agent, users=(), keep_containers=False) as again:
            assert "(JetStream store" in (home / "up.log").read_text()
            assert "resumed" in (home / "up.log").read_text()
            now = again.json("session", "info", made["id"], key="admin")
            assert (now["status"], now["container"]) == ("RUNNING", made["container"])
            state = docker("inspect", "-f", "{{.State.Running}}", made["container"]).strip()
            assert state == "true"
            after = _events(again.fgpu("events", "--json", key="admin"))
            assert [e["id"] for e in after[: len(history)]] == [e["id"] for e in history]
    finally:
        remove_agent_containers(agent)


def test_a_second_fgpu_up_on_the_same_store_is_refused(tmp_path: Path) -> None:
    require_docker()
    with fgpu_up(tmp_path / "home", users=()) as up:
        second = subprocess.run(
            [FGPU, "up", "--mock-gpus", "1"],
            env=up.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 1
        assert second.stderr.startswith(f"error: the store {tmp_path / 'home' / 'store'} is in use")
        assert up.process is not None and up.process.poll() is None


def test_fgpu_down_stops_it_and_an_ephemeral_store_goes_with_it(tmp_path: Path) -> None:
    require_docker()
    home = tmp_path / "home"
    with fgpu_up(home, "--ephemeral", users=()) as up:
        info = json.loads((home / "up.json").read_text())
        store = Path(info["store_dir"])
        assert store.is_dir() and not (home / "store").exists()
        down = subprocess.run(
            [FGPU, "down"], env=up.env, capture_output=True, text=True, timeout=90, check=False
        )
        assert down.returncode == 0, down.stderr
        assert down.stdout.strip() == f"fgpu up (pid {info['pid']}) stopped"
        assert up.process is not None and up.process.wait(10) == 0
        assert not store.exists() and not (home / "up.json").exists()
    again = subprocess.run(
        [FGPU, "down"], env=up.env, capture_output=True, text=True, timeout=30, check=False
    )
    assert again.returncode == 1 and "not running here" in again.stderr


def test_its_server_dies_with_it_and_an_orphan_is_stopped(tmp_path: Path) -> None:
    require_docker()
    home = tmp_path / "home"
    with fgpu_up(home, users=()) as up:
        server_pid = int((home / "store" / "nats-server.pid").read_text())
        assert up.process is not None
        up.process.send_signal(signal.SIGKILL)
        up.process.wait(10)
        assert _gone(server_pid, 15), "nats-server outlived fgpu up"
    # A server left on the store some other way (not one fgpu up started): stopped first.
    orphan = nats_server.start(str(home / "store"))
    try:
        with fgpu_up(home, users=()):
            said = (home / "up.log").read_text()
            assert f"stopped nats-server {orphan.process.pid}" in said
            assert orphan.process.poll() is not None
    finally:
        orphan.stop()
    assert os.path.exists(home / "store" / "nats-server.pid")
