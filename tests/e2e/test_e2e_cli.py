"""The issue's scenario through the `fgpu` command, on a real NATS server and Docker engine.

One node, one GPU split into 2 fGPU; a researcher asks for 3 sessions of 1 fGPU at once;
two become RUNNING in real containers, the third stays PENDING holding nothing; destroying
a running one lets the PENDING one run, with nobody doing anything.
"""

import fcntl
import json
import os
import pty
import select
import shutil
import signal
import socket
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from tests.support.cli_stack import FGPU, Stack, docker, exposed, fgpu_up
from tests.support.docker_env import require_docker, skip_or_fail
from tests.support.shim_kit import build_shim

pytestmark = [pytest.mark.docker, pytest.mark.slow]
GIB = 1 << 30
# Parts of $FGPU_HOME its owner's group may reach by design: the shim's regions, whose
# files the containers' processes share through a group of their own (the slice 0440,
# the counters 0660), in a directory that is the owner's alone.
OTHERS = {"regions": "the containers' group"}


def test_three_sessions_two_run_one_waits_then_runs(tmp_path: Path) -> None:
    require_docker()
    shim = build_shim(tmp_path / "shim")
    home = tmp_path / "home"
    with fgpu_up(home, "--shim-dir", str(shim), users=("researcher", "mallory")) as stack:
        created = stack.json(
            "session",
            "create",
            "--image",
            "fgpu/busybox:latest",
            "--fgpu",
            "1",
            "--cpu",
            "0.5",
            "--mem",
            "256m",
            "--count",
            "3",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo hello from $FGPU_SESSION_ID; sleep 3600",
        )["sessions"]
        by_status = sorted(s["status"] for s in created)
        assert by_status == ["PENDING", "RUNNING", "RUNNING"]
        running = [s for s in created if s["status"] == "RUNNING"]
        pending = next(s for s in created if s["status"] == "PENDING")
        assert pending["agent"] is None and pending["devices"] == []
        assert pending["waiting"].startswith("waiting for fGPU: no device in resource group")

        # Real containers, labelled, limited, told their slice.
        for s in running:
            inspect = json.loads(docker("inspect", s["container"]))[0]
            assert inspect["State"]["Running"]
            labels = inspect["Config"]["Labels"]
            assert labels["fgpu.session"] == s["id"]
            assert labels["fgpu.agent"] == stack.agent_id
            env = dict(e.split("=", 1) for e in inspect["Config"]["Env"])
            assert env["FGPU_MEM_LIMIT"] == str(8 * GIB)  # half of 16 GiB
            assert env["FGPU_SM_SHARE_PPM"] == "500000"
            assert env["FGPU_REGION"] == "/run/fgpu/region"
            assert env["LD_LIBRARY_PATH"] == "/opt/fgpu/lib"
            mounts = {m["Destination"]: m for m in inspect["Mounts"]}
            assert mounts["/opt/fgpu/lib"]["RW"] is False
            assert mounts["/run/fgpu/region"]["RW"] is True
            # The shim stands in for libcuda.so.1 inside the container.
            listed = docker("exec", s["container"], "ls", "/opt/fgpu/lib")
            assert "libcuda.so.1" in listed.split()
            assert inspect["HostConfig"]["Memory"] == 256 << 20
            assert inspect["HostConfig"]["NanoCpus"] == 500_000_000
        assert f"hello from {running[0]['id']}" in stack.fgpu("session", "logs", running[0]["id"])

        # A command in the container, through the agent over NATS: its streams and its
        # exit status; the slice's environment is the session's. Another user may not,
        # and the audit shows who ran what.
        script = 'echo "$FGPU_MEM_LIMIT"; echo err >&2; exit 3'
        ran = stack.run("session", "exec", running[0]["id"], "--", "sh", "-c", script)
        assert (ran.returncode, ran.stdout, ran.stderr) == (3, f"{8 * GIB}\n", "err\n")
        shown = stack.json("session", "exec", running[0]["id"], "--", "echo", "hi")
        assert (shown["ok"], shown["exit_code"], shown["stdout"]) == (True, 0, "hi\n")
        refused = stack.run("session", "exec", running[0]["id"], "--", "true", key="mallory")
        assert refused.returncode not in (0, 3) and refused.stdout == ""
        told = stack.fgpu("audit", "session", running[0]["id"])
        assert f"ran sh -c '{script}' in it" in told and "exited 3" in told

        # A terminal, as a person at a keyboard: `fgpu session shell` under a pty. What is
        # typed runs in the container, a resize reaches its terminal, the exit status is
        # the shell's; another user is refused. And a port of the container, forwarded.
        assert _shell_session(stack, running[0]["id"]) == 5
        refused = stack.run("session", "shell", running[0]["id"], key="mallory")
        # (The read API shows her no such session; the agent's own refusal, asked over NATS
        # with her credentials, is a row of test_adversarial.py.)
        assert refused.returncode not in (0, 5) and refused.stdout == ""
        assert _http_through_app(stack, running[0]["id"]).endswith(b"served-by-busybox\n")
        told = stack.fgpu("audit", "session", running[0]["id"])
        assert "opened a terminal" in told and "exit 5" in told
        assert "opened port 8080 into it" in told

        agents = stack.json("agents", "ls")["agents"]
        gpu = agents[0]["gpus"][0]
        assert gpu["allocated"] == "2"
        assert {sh["session"] for sh in gpu["shares"]} == {s["id"] for s in running}

        # Someone else may not destroy it.
        refused = stack.run("session", "rm", running[0]["id"], key="mallory")
        assert refused.returncode == 1 and "another access key" in refused.stderr

        # Its output followed: the last lines at once, then it ends when the session does.
        follower = stack.popen("session", "logs", "-f", running[0]["id"], stdout=subprocess.PIPE)
        try:
            assert follower.stdout is not None
            assert follower.stdout.readline() == f"hello from {running[0]['id']}\n".encode()
            stack.fgpu("session", "rm", running[0]["id"])
            assert follower.wait(30) == 0
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
            if follower.stdout is not None:
                follower.stdout.close()
        waited = stack.json("session", "wait", pending["id"], "--for", "running", "--timeout", "15")
        assert waited["sessions"][0]["status"] == "RUNNING"
        listed = {s["id"]: s["status"] for s in stack.json("session", "ls", "--all")["sessions"]}
        assert listed[running[0]["id"]] == "TERMINATED"
        assert listed[running[1]["id"]] == "RUNNING"
        # Its output outlives its container: its agent kept it before removing it, for
        # its owner (and its domain's administrators) only.
        assert not docker("ps", "-aq", "--filter", f"id={running[0]['container']}").strip()
        kept = stack.fgpu("session", "logs", running[0]["id"])
        assert f"hello from {running[0]['id']}" in kept
        assert docker("ps", "-aq", "--filter", f"label=fgpu.session={running[0]['id']}") == ""

        info = stack.json("session", "info", pending["id"])
        reached = [moment for moment, at in info["times"].items() if at is not None]
        assert reached == ["requested", "admitted", "scheduled", "preparing", "running"]

        # What $FGPU_HOME holds (the store, the projections, keys, tokens, kept output,
        # up.json) is its user's only.
        assert (home / "store" / "projections.duckdb").is_file()
        assert {"api-tokens.json", "credentials", "up.json", "output"} <= {
            p.name for p in home.iterdir()
        }
        found = exposed(home, OTHERS)
        assert not found, "\n".join(found)
        regions = home / "regions"
        assert regions.stat().st_mode & 0o777 == 0o700
        shared = [p for p in regions.rglob("*") if p.lstat().st_mode & 0o007]
        assert not shared, shared


def _shell_session(stack: Stack, session_id: str) -> int:
    """Type into ``fgpu session shell`` on a pty of 30 x 100, resize it to 40 x 120, exit 5;
    its exit status."""
    master, slave = pty.openpty()
    _set_size(slave, 30, 100)
    shell = stack.popen("session", "shell", session_id, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    screen = _Screen(master)
    try:
        # Typed again until it shows: keys typed while the shell starts may be eaten (ash
        # asks the terminal where its cursor is, and reads what comes as the answer).
        screen.ask("echo sum-$((6*7)); stty size\r", b"sum-42", b"30 100")
        _set_size(master, 40, 120)
        shell.send_signal(signal.SIGWINCH)
        # The resize and the keys travel apart, too.
        screen.ask("stty size\r", b"40 120")
        screen.type("exit 5\r")
        return shell.wait(20)
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(master)


def test_a_terminal_under_tmux_runs_what_is_typed_and_follows_a_resize(tmp_path: Path) -> None:
    """``fgpu session shell`` in a tmux pane, as a person in tmux uses it: keys sent to
    the pane run in the container, the pane's resize reaches the container's terminal,
    and the shell's exit status comes back to the pane."""
    require_docker()
    if shutil.which("tmux") is None:
        skip_or_fail("no tmux: scripts/test-deps installs it")
    with fgpu_up(tmp_path / "home") as stack:
        ask = ["session", "create", "--image", "fgpu/busybox:latest", "--cpu-only"]
        [s] = stack.json(*ask, "--cpu", "0.5", "--mem", "64m", "--wait")["sessions"]
        assert (s["status"], s["type"]) == ("RUNNING", "interactive")  # its shell waits
        tmux = _Tmux(tmp_path / "tmux.sock", stack.command_env())
        try:
            shell = f"{FGPU} session shell {s['id']}; echo exited-$?; sleep 60"
            tmux("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", shell)
            tmux.ask("echo sum-$((6*7)); stty size", "sum-42", "30 100")
            tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
            tmux.ask("stty size", "40 120")
            tmux("send-keys", "-t", "t", "exit 5", "Enter")
            tmux.shows("exited-5")
        finally:
            tmux("kill-server", check=False)


class _Tmux:
    """A tmux server of its own (``socket``), started with ``env``: its panes run
    ``fgpu`` as the stack's user."""

    def __init__(self, socket: Path, env: dict[str, str]) -> None:
        self.socket, self.env = socket, env

    def __call__(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            ["tmux", "-f", "/dev/null", "-S", str(self.socket), *args],
            env=self.env, capture_output=True, text=True, timeout=20, check=check,
        )  # fmt: skip
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-J", "-t", "t", "-S", "-")

    def shows(self, *texts: str, within_s: float = 20) -> str:
        deadline = time.monotonic() + within_s
        while True:
            seen = self.screen()
            if all(t in seen for t in texts):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError((texts, seen[-800:]))
            time.sleep(0.1)  # polling a terminal we do not own, bounded by the deadline

    def ask(self, keys: str, *texts: str) -> None:
        """Send ``keys`` and Enter until all of ``texts`` show after them (20 s at most):
        keys sent while the shell starts may be eaten, as under a pty."""
        deadline = time.monotonic() + 20
        while True:
            before = self.screen()
            self("send-keys", "-t", "t", keys, "Enter")
            try:
                seen = self.shows(*texts, within_s=1)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                continue
            if seen.count(texts[-1]) > before.count(texts[-1]):
                return


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class _Screen:
    def __init__(self, master: int) -> None:
        self.master, self.seen = master, b""

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def ask(self, keys: str, *texts: bytes) -> None:
        """Type ``keys`` until all of ``texts`` have been shown since (20 s at most)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            start = len(self.seen)
            self.type(keys)
            until = min(deadline, time.monotonic() + 1)
            while (left := until - time.monotonic()) > 0:
                if all(t in self.seen[start:] for t in texts):
                    return
                if select.select([self.master], [], [], left)[0]:
                    self.seen += os.read(self.master, 4096)
        raise AssertionError((keys, texts, self.seen[-500:]))


def _http_through_app(stack: Stack, session_id: str) -> bytes:
    """busybox's httpd started in the session (through exec), reached on a local port that
    ``fgpu session app ID 8080`` forwards; its answer to ``GET /``."""
    serve = "mkdir -p /tmp/www && echo served-by-busybox > /tmp/www/index.html"
    started = stack.run(
        "session", "exec", session_id, "--", "sh", "-c", f"{serve} && httpd -p 8080 -h /tmp/www"
    )
    assert started.returncode == 0, started.stderr
    with stack.popen("session", "app", session_id, "8080", stdout=subprocess.PIPE) as app:
        try:
            assert app.stdout is not None
            line = app.stdout.readline().decode()  # 127.0.0.1:PORT -> 8080 in session ...
            port = int(line.split()[0].rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
                conn.sendall(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
                answer = b""
                while chunk := conn.recv(4096):
                    answer += chunk
            return answer
        finally:
            app.terminate()
