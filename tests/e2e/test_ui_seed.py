"""The web UI's seed check, end to end, as issue 22 names it and ``scripts/web-check``
runs it (one scenario: ``tests/support/web_check.py``), against a fresh ``fgpu up`` on a
real Docker engine, in headless Chromium: sign in; launch a 0.5-fGPU session with the
slider on a node whose one GPU is split into 2 fGPU; see it RUNNING with ``gpu0 0.5``;
open its terminal; type ``nvidia-smi`` and read the slice's total in the terminal (a
quarter of the 16 GiB GPU, computed from the slice; the shim's NVML over a stand-in
driver, as ``make demo`` does); a second user sees none of it; terminate. Its terminal's
screenshot is docs/ui-terminal.png."""

import subprocess
from pathlib import Path

import pytest

from tests.support.browser import browser_or_skip
from tests.support.docker_env import require_docker, skip_or_fail
from tests.support.shim_kit import SHIM_DIR
from tests.support.web_check import (
    BASE_IMAGE,
    MIB,
    Steps,
    chromium,
    run_seed,
    seed_stack,
    slice_total,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_the_seed_check_a_researcher_sees_her_slice_in_nvidia_smi_in_the_web_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_docker()
    browser_or_skip()
    base = subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True)
    if base.returncode != 0:
        skip_or_fail(f"no {BASE_IMAGE}: scripts/docker-up --python makes it")
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    subprocess.run(["make", "-s", "-C", str(SHIM_DIR)], check=True, capture_output=True)
    steps = Steps()
    with seed_stack(tmp_path, steps) as seed:
        run_seed(seed, chromium, steps)
    assert steps.total == f"{slice_total() // MIB}MiB" == "4096MiB"  # 16 GiB / 2 fGPU * 0.5
    assert set(steps.seconds) >= {"launch", "running", "nvidia_smi", "isolation", "terminate"}
    shot = seed.shots / "ui-terminal.png"
    assert shot.stat().st_size > 10_000
    print(f"\nUI screenshot: {shot}; steps: {steps.seconds}")
