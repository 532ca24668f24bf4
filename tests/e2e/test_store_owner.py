"""A store's owner cannot be displaced: the lock is the kernel's, held on an open
descriptor (removing ``fgpu.lock`` takes nothing); a nats-server on the store is stopped
only when its owner is proven dead (pid *and* start time); a refused `fgpu up` leaves
the first's files as they were. Real processes, the dummy runtime (no Docker)."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from services.adapters import nats_server
from services.adapters.store_lock import Process, StoreInUse, StoreLock, stop_orphan
from tests.support.cli_stack import FGPU, Stack, fgpu_up, wait_for_line

DUMMY = ("--runtime", "dummy", "--no-shim")
UP = [FGPU, "up", "--mock-gpus", "1", *DUMMY]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is neither fgpu up nor nats-server: the one a stale pid now
    names."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield p
    p.kill()
    p.wait()


def _stack(home: Path) -> "AbstractContextManager[Stack]":
    return fgpu_up(home, *DUMMY, users=(), keep_containers=True)


def _one_line(p: "subprocess.CompletedProcess[str]") -> str:
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_a_deleted_lock_file_lets_no_second_fgpu_up_in(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with _stack(home) as up:
        assert up.process is not None
        server = int((home / "store" / "nats-server.pid").read_text())
        said = (home / "up.json").read_bytes()
        (home / "store" / "fgpu.lock").unlink()
        second = subprocess.run(UP, env=up.env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        line = _one_line(second)
        assert line.startswith(f"error: the store {home / 'store'} is in use"), line
        # The first's server, state file and service go on as they were.
        assert (home / "up.json").read_bytes() == said
        assert Process(server, None).runs() and up.process.poll() is None
        assert up.agent_id in up.fgpu("agents", "ls", key="admin")


def test_a_second_fgpu_up_on_another_store_of_its_home_is_refused(tmp_path: Path) -> None:
    """The home's up.json is one stack's: another store does not make room for another."""
    home = tmp_path / "home"
    with _stack(home) as up:
        assert up.process is not None
        said = (home / "up.json").read_bytes()
        other = [*UP, "--store", str(tmp_path / "other")]
        second = subprocess.run(other, env=up.env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert f"another fgpu up (pid {up.process.pid}) runs with FGPU_HOME" in _one_line(second)
        assert (home / "up.json").read_bytes() == said


def test_two_fgpu_ups_racing_for_one_store_make_one_stack(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FGPU_")}
    env["FGPU_HOME"] = str(home)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    ups = []
    for log in logs:
        with open(log, "wb") as out:
            ups.append(subprocess.Popen(UP, env=env, stdout=out, stderr=subprocess.STDOUT))
    try:
        # The loser is refused at once; the winner becomes ready.
        deadline = time.monotonic() + 60
        while not (ended := [i for i, p in enumerate(ups) if p.poll() is not None]):
            assert time.monotonic() < deadline, "neither was refused"
            time.sleep(0.05)
        [loser] = ended
        code = ups[loser].returncode
        winner = 1 - loser
        assert code == 1, logs[loser].read_text()
        lines = logs[loser].read_text().splitlines()
        assert len(lines) == 1 and "is in use by another fgpu up" in lines[0], lines
        wait_for_line(logs[winner], "ready", ups[winner], 60)
        assert f'"pid": {ups[winner].pid},' in (home / "up.json").read_text()
    finally:
        for p in ups:
            p.terminate()
            p.wait(30)


def _record(store: Path, text: str) -> None:
    store.mkdir(parents=True, exist_ok=True)
    (store / "fgpu.lock").write_text(text)


def test_a_server_whose_owner_still_runs_is_left_alone(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server = nats_server.start(str(store))
    try:
        _record(store, f"{Process.me()}\n")  # its owner: this process, alive
        lock = StoreLock(store)
        try:
            with pytest.raises(StoreInUse, match=f"nats-server {server.process.pid} serves"):
                stop_orphan(lock)
        finally:
            lock.release()
        assert server.process.poll() is None
        (store / "fgpu.lock").unlink()  # no owner on record proves none dead either
        lock = StoreLock(store)
        try:
            with pytest.raises(StoreInUse, match="nobody on record"):
                stop_orphan(lock)
        finally:
            lock.release()
        assert server.process.poll() is None
    finally:
        server.stop()


def test_an_owner_whose_pid_another_process_took_is_dead(
    tmp_path: Path, sleeper: "subprocess.Popen[bytes]"
) -> None:
    store = tmp_path / "store"
    server = nats_server.start(str(store))
    try:
        started = _started(sleeper.pid)
        # The owner on record had the pid the sleeper has now, and started before it.
        _record(store, f"{sleeper.pid} {started - 1}\n")
        lock = StoreLock(store)
        try:
            assert stop_orphan(lock) == server.process.pid
        finally:
            lock.release()
        assert server.process.wait(10) is not None
        assert sleeper.poll() is None
    finally:
        server.stop()


def test_a_pid_file_naming_another_process_stops_nothing(
    tmp_path: Path, sleeper: "subprocess.Popen[bytes]"
) -> None:
    store = tmp_path / "store"
    _record(store, "1 1\n")  # an owner long dead
    (store / "nats-server.pid").write_text(f"{sleeper.pid}\n")
    lock = StoreLock(store)
    try:
        assert stop_orphan(lock) is None
    finally:
        lock.release()
    assert sleeper.poll() is None


def test_fgpu_down_signals_no_process_that_took_a_stale_pid(
    tmp_path: Path, sleeper: "subprocess.Popen[bytes]"
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # Written by an fgpu up that died; its pid is the sleeper's now, a later process's.
    stale = {"nats_url": "nats://127.0.0.1:1", "store_dir": str(home / "store"), "agent_id": None}
    stale |= {"pid": sleeper.pid, "started": _started(sleeper.pid) - 1}
    (home / "up.json").write_text(json.dumps(stale))
    env = {**os.environ, "FGPU_HOME": str(home)}
    down = subprocess.run(
        [FGPU, "down", "--timeout", "5"], env=env, capture_output=True, text=True, timeout=60
    )
    assert down.returncode == 1
    assert "its state file was stale" in _one_line(down)
    assert sleeper.poll() is None and not (home / "up.json").exists()


def _started(pid: int) -> int:
    """When the running process ``pid`` started, as ``Process`` tells."""
    now = Process.of(pid)
    assert now is not None and now.started is not None
    return now.started
