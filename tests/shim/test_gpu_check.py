"""scripts/gpu-check's CPU side: it skips cleanly without a GPU, reads the region's
counters where the shim writes them, and judges shares and pairs as the issue states."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType

import pytest

from gpu_shim import open_region
from tests.support.shim_kit import Kit, read_line, running

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check"


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    loader = SourceFileLoader("gpu_check", str(SCRIPT))
    spec = spec_from_loader("gpu_check", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_without_a_gpu_it_says_why_and_passes(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no nvidia-smi on it
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["check"] == "gpu-shim" and "nvidia-smi" in out["skipped"]


def test_it_reads_the_counters_the_shim_wrote(
    gpu_check: ModuleType, kit: Kit, state: Path, tmp_path: Path
) -> None:
    region = tmp_path / "c"
    env = kit.env(state=state, region=region, sm_share="0.25")
    kit.run("launch", "0.5", "2000000", env=env)
    got = gpu_check.region_counters(region)
    with open_region(region) as r:
        dev = r.device(0)
        want = {"launches": dev.launches, "charged_ns": dev.charged_ns,
                "throttled_ns": dev.throttled_ns}  # fmt: skip
    assert got == want and got["throttled_ns"] > 0


def test_it_reads_the_slots_the_shim_wrote(
    gpu_check: ModuleType, kit: Kit, state: Path, tmp_path: Path
) -> None:
    region = tmp_path / "c"
    env = kit.env(state=state, region=region, mem_limit="1GiB")
    with running(kit, "hold", str(64 << 20), env=env) as p:
        assert read_line(p).get("held") is not None
        got = gpu_check.region_slots(region)
        with open_region(region) as r:
            want = {s.pid: s.bytes[0] for s in r.processes()}
    assert got == want and list(got.values()) == [64 << 20]


def test_shares_and_pairs_are_judged_within_five_percent(gpu_check: ModuleType) -> None:
    assert gpu_check.share_ok(0.524, 0.5) and not gpu_check.share_ok(0.53, 0.5)
    assert not gpu_check.share_ok(0.0, 0.0)
    runs = [{"rate": 256.0}, {"rate": 636.0}]
    fig = gpu_check._pair_figures(runs, 1000.0, (0.25, 0.75))
    # The measured H100 pair: its 0.25 container took 0.287 of the aggregate.
    assert fig["parts"] == [0.287, 0.713] and fig["aggregate"] == 0.892
    assert fig["pass"] is False
    fair = gpu_check._pair_figures([{"rate": 230.0}, {"rate": 660.0}], 1000.0, (0.25, 0.75))
    assert fair["pass"] is True
    assert "pass" not in gpu_check._pair_figures(runs, 1000.0, None)


def test_the_floor_candidates_come_from_the_event_figures(gpu_check: ModuleType) -> None:
    events = {
        "tiny_kernel": {"median_us": 6.2},
        "tiny_kernel_profiled_us": 2.0,
        "memset_1b": {"median_us": 3.5},
        "empty_kernel": {"median_us": 5.1},
    }
    none = {"none": 0}
    assert gpu_check.candidate_floors(events) == {
        **none,
        "pair_minus_kernel": 4200,
        "memset_1b_pair": 3500,
        "empty_kernel_pair": 5100,
    }
    assert gpu_check.candidate_floors({"tiny_kernel": {"median_us": 6.2}}) == none
    shorter = {"tiny_kernel": {"median_us": 1.0}, "tiny_kernel_profiled_us": 2.0}
    assert gpu_check.candidate_floors(shorter) == {**none, "pair_minus_kernel": 0}
    failed = {"tiny_kernel_profiled_us": "profiler: no CUPTI", "memset_1b": {"error": "x"}}
    assert gpu_check.candidate_floors(failed) == none


def test_the_launch_bound_figure_is_the_median_run(gpu_check: ModuleType) -> None:
    runs = [{"rate": 90.0}, {"rate": 110.0}, {"rate": 100.0}]
    assert gpu_check._median_run(runs) == {"rate": 100.0}
    assert gpu_check._median_run([{"rate": 2.0}, {"rate": 1.0}]) == {"rate": 1.0}


def test_the_pacer_ticks_while_a_pair_runs(gpu_check: ModuleType) -> None:
    class Pacer:
        ticks = 0

        def tick(self) -> float:
            self.ticks += 1
            return 0.9

    pacer = Pacer()
    with gpu_check._ticking(pacer) as scales:
        while pacer.ticks < 2:
            time.sleep(0.05)
    assert scales[:2] == [0.9, 0.9]
    with gpu_check._ticking(None) as none:
        time.sleep(2 * gpu_check.PACE_TICK_S)
    assert none == []
