"""MpsDaemons against a stand-in ``nvidia-cuda-mps-control`` (a shell script that writes down
how it was run), and the contract it shares with FakeMps."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from services.adapters.mps_daemon import MpsDaemons, pipe_dir
from services.ports import MpsControl, MpsUnavailable
from services.testing import FakeMps

# Writes one line per run: its arguments, the MPS environment, and what it read on stdin.
# With -d it plays the daemon: its pid file in the pipe directory (a live pid: its parent's,
# the test's), or fails as FAIL_ON names its GPU.
STAND_IN = """#!/bin/sh
line="args=$* dev=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY"
if [ "$1" = "-d" ]; then
    if [ "$CUDA_VISIBLE_DEVICES" = "$FAIL_ON" ]; then echo "cannot start: no device" >&2; exit 1; fi
    echo "$PPID" > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
    echo "$line" >> "$RUNS"; exit 0
fi
read cmd; echo "$line stdin=$cmd" >> "$RUNS"
"""


@pytest.fixture
def program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "bin" / "nvidia-cuda-mps-control"
    exe.parent.mkdir()
    exe.write_text(STAND_IN)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("PATH", f"{exe.parent}:{os.environ['PATH']}")
    return exe


def runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "runs"
    return path.read_text().splitlines() if path.exists() else []


def gpus(root: Path) -> dict[str, str]:
    return {"GPU-a": pipe_dir(str(root), 0), "GPU-b": pipe_dir(str(root), 1)}


def test_one_daemon_per_gpu_on_its_own_directories_quit_at_stop(
    program: Path, tmp_path: Path
) -> None:
    root = tmp_path / "mps"
    daemons = MpsDaemons(gpus(root))
    daemons.start()
    a, b = root / "0", root / "1"
    assert runs(tmp_path) == [
        f"args=-d dev=GPU-a pipe={a}/pipe log={a}/log",
        f"args=-d dev=GPU-b pipe={b}/pipe log={b}/log",
    ]
    assert (a / "log").is_dir() and (b / "log").is_dir()
    daemons.stop()
    assert runs(tmp_path)[2:] == [
        f"args= dev=GPU-a pipe={a}/pipe log={a}/log stdin=quit",
        f"args= dev=GPU-b pipe={b}/pipe log={b}/log stdin=quit",
    ]


def test_a_daemon_running_on_its_directory_is_kept(program: Path, tmp_path: Path) -> None:
    root = tmp_path / "mps"
    MpsDaemons(gpus(root)).start()  # an agent that died, its daemons left running
    again = MpsDaemons(gpus(root))
    again.start()
    assert len(runs(tmp_path)) == 2  # no second -d
    again.stop()
    assert [r.endswith("stdin=quit") for r in runs(tmp_path)] == [False, False, True, True]


def test_no_program_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    with pytest.raises(MpsUnavailable, match=r"nvidia-cuda-mps-control not found.*--mps"):
        MpsDaemons(gpus(tmp_path / "mps")).start()


def test_a_daemon_that_fails_is_said_and_those_started_are_stopped(
    program: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_ON", "GPU-b")
    with pytest.raises(MpsUnavailable, match=r"GPU-b.*failed: cannot start: no device"):
        MpsDaemons(gpus(tmp_path / "mps")).start()
    done = runs(tmp_path)
    assert len(done) == 2 and "dev=GPU-a" in done[1] and done[1].endswith("stdin=quit")


def test_a_pipe_directory_too_long_for_a_socket_is_refused(program: Path, tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 100)
    with pytest.raises(MpsUnavailable, match="too long for a socket"):
        MpsDaemons({"GPU-a": pipe_dir(str(deep), 0)}).start()
    assert runs(tmp_path) == []


@pytest.mark.parametrize("kind", ["adapter", "fake"])
def test_the_contract(kind: str, program: Path, tmp_path: Path) -> None:
    """Both: the pipe directories as given; start then stop, stop again harmless."""
    given = gpus(tmp_path / "mps")
    control: MpsControl = MpsDaemons(given) if kind == "adapter" else FakeMps(given)
    assert control.pipe_dirs == given
    control.start()
    control.stop()
    control.stop()
    refused: MpsControl = (
        MpsDaemons(given, program=str(tmp_path / "none"))
        if kind == "adapter"
        else FakeMps(given, refuse="none")
    )
    with pytest.raises(MpsUnavailable):
        refused.start()
