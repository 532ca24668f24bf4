"""The issue's scenario through the `fgpu` command, on a real NATS server and Docker engine.

One node, one GPU split into 2 fGPU; a researcher asks for 3 sessions of 1 fGPU at once;
two become RUNNING in real containers, the third stays PENDING holding nothing; destroying
a running one lets the PENDING one run, with nobody doing anything.
"""

import json
from pathlib import Path

import pytest
from cli_stack import docker, fgpu_up
from docker_env import require_docker

from tests.shim.shim_kit import build_shim

pytestmark = [pytest.mark.docker, pytest.mark.slow]
GIB = 1 << 30


def test_three_sessions_two_run_one_waits_then_runs(tmp_path: Path) -> None:
    require_docker()
    shim = build_shim(tmp_path / "shim")
    with fgpu_up(tmp_path, "--shim-dir", str(shim), users=("researcher", "mallory")) as stack:
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
        assert "waiting for 1 fGPU" in pending["waiting"]

        # Real containers, labelled, limited, told their slice.
        for s in running:
            inspect = json.loads(docker("inspect", s["container"]))[0]
            assert inspect["State"]["Running"]
            labels = inspect["Config"]["Labels"]
            assert labels["fgpu.session"] == s["id"]
            assert labels["fgpu.agent"] == stack.agent_id
            env = dict(e.split("=", 1) for e in inspect["Config"]["Env"])
            assert env["FGPU_MEM_LIMIT"] == str(8 * GIB)  # half of 16 GiB
            assert env["FGPU_SM_SHARE"] == "0.5"
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

        agents = stack.json("agents", "ls")["agents"]
        gpu = agents[0]["gpus"][0]
        assert gpu["allocated"] == "2"
        assert {sh["session"] for sh in gpu["shares"]} == {s["id"] for s in running}

        # Someone else may not destroy it.
        refused = stack.run("session", "rm", running[0]["id"], key="mallory")
        assert refused.returncode == 1 and "another access key" in refused.stderr

        stack.fgpu("session", "rm", running[0]["id"])
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
