"""Time limits of a resource group on real containers, through `fgpu up`: a session past
its lifetime and an interactive one idle past the idle timeout end with their reasons;
an interactive one that keeps a CPU busy runs on, and so does an idle batch one."""

from pathlib import Path

import pytest

from tests.support.cli_stack import fgpu_up
from tests.support.docker_env import require_docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]
IDLE_S = 12


def test_lifetime_and_idle_end_sessions_and_cpu_use_keeps_one_alive(tmp_path: Path) -> None:
    require_docker()
    with fgpu_up(tmp_path, "--no-shim") as stack:
        update = ["admin", "group", "update", "default", "--idle-timeout", str(IDLE_S)]
        refused = stack.run(*update, key="admin")  # the scheduler's settings: give them whole
        assert refused.returncode == 2 and "--policy first" in refused.stderr
        stack.fgpu(*update, "--policy", "best-fit", key="admin")
        create = ["session", "create", "--image", "fgpu/busybox:latest", "--fgpu", "0.5"]
        create += ["--cpu", "0.5", "--mem", "128m", "--wait"]

        def one(*args: str) -> str:
            [made] = stack.json(*create, *args)["sessions"]
            assert made["status"] == "RUNNING", made
            return str(made["id"])

        short = one("--lifetime", "3", "--", "sleep", "3600")
        idle = one("--type", "interactive")  # the image's shell, on a terminal
        busy = one("--type", "interactive", "--", "sh", "-c", "while :; do :; done")
        batch = one("--", "sleep", "3600")  # batch: idleness does not end it
        ended = stack.json("session", "wait", short, "--for", "ended", "--timeout", "30")
        [s] = ended["sessions"]
        assert s["status"] == "TERMINATED" and s["reason"].startswith("lifetime of 3 s reached")
        ended = stack.json("session", "wait", idle, "--for", "ended", "--timeout", "60")
        [s] = ended["sessions"]
        assert s["status"] == "TERMINATED" and s["reason"].startswith(f"idle for {IDLE_S} s")
        s = stack.json("session", "info", busy)
        assert s["status"] == "RUNNING", s  # its CPU time kept growing past the idle one's end
        s = stack.json("session", "info", batch)
        assert (s["status"], s["type"]) == ("RUNNING", "batch")
        stack.fgpu("session", "rm", busy, batch)
