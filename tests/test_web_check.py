"""``scripts/web-check`` without Docker or a browser: it says what it does, and its
scenario's expected figure is the slice's (tests/e2e/test_ui_seed.py runs the scenario)."""

import os
import subprocess
import sys
from pathlib import Path

from tests.support.web_check import GPU_MEM, MIB, main, slice_total

ROOT = Path(__file__).resolve().parents[1]


def test_web_check_says_what_it_runs_and_prints() -> None:
    env = {**os.environ, "PYTHON": sys.executable, "DOCKER_HOST": "unix:///nonexistent"}
    done = subprocess.run(
        [ROOT / "scripts" / "web-check", "--help"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "usage: scripts/web-check" in done.stdout
    assert "nvidia-smi" in done.stdout and "one JSON line" in done.stdout


def test_the_scenario_reads_a_quarter_of_the_gpu_at_half_an_fgpu_of_two() -> None:
    assert slice_total() == GPU_MEM // 4
    assert slice_total(100) == GPU_MEM // 2  # 1 of 2 fGPU: half
    assert slice_total() // MIB == 4096


def test_a_bad_option_is_refused_before_anything_starts() -> None:
    try:
        main(["--no-such-option"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("an unknown option was accepted")
