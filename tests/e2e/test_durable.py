"""A default never loses data: `fgpu up` keeps its log in $FGPU_HOME, a restart resumes
the same history and re-adopts the containers still running, one store has one `fgpu up`,
and neither its nats-server nor its serving proxy (HAProxy) outlives it. Real processes,
real Docker."""

import json
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from services.adapters import nats_server
from services.adapters.store_lock import alive
from tests.support.cli_stack import FGPU, docker, fgpu_up, remove_agent_containers
from tests.support.docker_env import require_docker
from tests.support.haproxy_env import haproxy_pids

pytestmark = pytest.mark.docker
IMAGE = "fgpu/busybox:latest"


def _gone(pid: int, within_s: float) -> bool:
    """Whether process ``pid`` has exited (a zombie counts) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
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
        proxies = haproxy_pids(under=up.process.pid)  # the serving proxy's master, worker
        assert proxies
        up.process.send_signal(signal.SIGKILL)
        up.process.wait(10)
        assert _gone(server_pid, 15), "nats-server outlived fgpu up"
        assert all(_gone(pid, 15) for pid in proxies), "haproxy outlived fgpu up"
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


def test_a_store_made_with_retention_archives_its_past_and_still_reads_it_whole(
    tmp_path: Path,
) -> None:
    """`fgpu up --retain-events`: the archiver (its own service key, its own permissions)
    moves the past into Parquet once the snapshots cover it, says so on the log, and the
    stream keeps only the rest; the read API still serves every event, a projections
    rebuild reads archive and stream as one, and a restart starts from the snapshots."""
    home = tmp_path / "home"
    keep = ("--retain-events", "15", "--archive-every", "0.3", "--snapshot-events", "3")
    with fgpu_up(home, *keep, "--runtime", "dummy", users=()) as up:
        create = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--wait"]
        ids = [up.json(*create, key="admin")["sessions"][0]["id"] for _ in range(4)]
        up.fgpu("session", "rm", *ids[:3], key="admin")
        deadline = time.monotonic() + 60
        while not (segments := up.json("archive", "ls", key="admin")):
            assert time.monotonic() < deadline, (home / "up.log").read_text()[-3000:]
            time.sleep(0.3)
        assert segments[0]["first_seq"] == 1
        served = _events(up.fgpu("events", "--json", key="admin"))
        assert [e["seq"] for e in served] == list(range(1, len(served) + 1))
        said = [e for e in served if e["type"] == "log.archived.v1"]
        assert said and said[0]["data"]["segment"] == segments[0]["segment"]
        info = up.json("stream", "info", key="admin")
        assert info["messages"] < info["last_seq"]  # the tenancy stays: first_seq may be 1
        # A projection rebuilt from the start reads the archive, then the stream.
        db = tmp_path / "rebuilt.duckdb"
        keys = ("--service-keys", str(home / "store" / "services.json"))
        rebuilt = up.fgpu(*keys, "projections", "rebuild", "--db", str(db), key="admin")
        found = re.search(r": (\d+) events in", rebuilt)
        assert found is not None and int(found[1]) >= len(served), rebuilt
    with fgpu_up(home, *keep, "--runtime", "dummy", users=()) as again:
        log = (home / "up.log").read_text()
        assert "snapshot.ignored" not in log and "HistoryMissing" not in log
        again_served = _events(again.fgpu("events", "--json", key="admin"))
        assert [e["id"] for e in again_served[: len(served)]] == [e["id"] for e in served]
        assert again.json("session", "info", ids[3], key="admin")["status"] == "RUNNING"
