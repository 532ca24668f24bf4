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
from types import ModuleType, SimpleNamespace
from typing import Any

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


def _served(b1: float, b32: float, **own: Any) -> dict[str, Any]:
    """A process's line after serving both batch sizes in turn."""
    phases = {"infer_b1": {"rate": b1}, "infer_b32": {"rate": b32}}
    return {"phases": phases, **own}


def test_inference_replicas_are_figured_against_the_whole_gpu(gpu_check: ModuleType) -> None:
    whole = _served(1000.0, 8000.0, sm_mhz=1200)
    solo = {"0.5": _served(990.0, 4600.0), "0.25": {"error": ["CUDA out of memory"]}}
    groups = {
        ("0.5", "0.5"): [_served(600.0, 3600.0), _served(400.0, 3400.0)],
        ("0.25",) * 4: [_served(250.0, 1800.0, slept_s=0.4)] * 4,
    }
    fig = gpu_check.infer_figures(whole, solo, groups)
    b1, b32 = fig["infer_b1"], fig["infer_b32"]
    assert b1["whole"] == {"rate": 1000.0} and b32["solo_0.5"]["of_whole"] == 0.575
    assert b1["solo_0.5"]["of_whole"] == 0.99
    assert b1["solo_0.25"] == {"error": ["CUDA out of memory"], "of_whole": 0.0}
    # Equal shares should split a group's aggregate equally (within 5 %, as the pairs).
    assert b1["2x0.5"]["of_solo"] == [0.6, 0.4] and b1["2x0.5"]["pass"] is False
    assert b32["2x0.5"]["aggregate"] == 0.875 and b32["2x0.5"]["pass"] is True
    assert b32["4x0.25"]["parts"] == [0.25] * 4 and b32["4x0.25"]["aggregate"] == 0.9
    assert fig["processes"]["whole"] == {"sm_mhz": 1200}
    assert fig["processes"]["4x0.25"] == [{"slept_s": 0.4}] * 4
    line = gpu_check.table({"infer": fig})
    assert line.startswith("info  infer") and "b32: solo_0.5=0.575" in line
    assert "4x0.25=0.9" in line


def test_processes_serving_in_turn_start_each_window_together(
    gpu_check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child speaking gpu-check's barrier: ready, then go, once per kind of "a+b". The
    # parent must send each window's go only when every process is ready for it; one
    # child is slow to get ready for each.
    child = tmp_path / "child.py"
    child.write_text(
        "import json, os, sys, time\n"
        "got = {}\n"
        "for k in sys.argv[3].split(':')[0].split('+'):\n"
        "    time.sleep(float(os.environ.get('SETUP_S', '0')))\n"
        "    ready = time.time()\n"
        "    print(json.dumps({'ready': True}), flush=True)\n"
        "    sys.stdin.readline()\n"
        "    got[k] = {'ready_at': ready, 'go_at': time.time()}\n"
        "print(json.dumps({'phases': got}))\n"
    )
    monkeypatch.setattr(gpu_check, "__file__", str(child))
    c = gpu_check.Checker(tmp_path, ("libcuda", "libnvml"), tmp_path, 1 << 30, 0.1)
    slow = c.env(shim=False, extra={"SETUP_S": "0.3"})
    got = c.pair("infer_b1+infer_b32", [c.env(shim=False), slow, c.env(shim=False)])
    for kind in gpu_check.INFER_KINDS:
        phase = [g["phases"][kind] for g in got]
        assert min(p["go_at"] for p in phase) >= max(p["ready_at"] for p in phase)


def test_a_child_measures_each_kind_in_turn(
    gpu_check: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows: list[tuple[str, float, bool]] = []

    def rate(torch: Any, dev: Any, kind: str, seconds: float, barrier: bool) -> dict[str, Any]:
        windows.append((kind, seconds, barrier))
        return {"rate": float(len(windows))}

    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(device=lambda *a: a))
    monkeypatch.setattr(gpu_check, "_rate", rate)
    got = gpu_check._child("rate", "infer_b1+infer_b32:2.5:1")
    assert got == {"phases": {"infer_b1": {"rate": 1.0}, "infer_b32": {"rate": 2.0}}}
    assert windows == [("infer_b1", 2.5, True), ("infer_b32", 2.5, True)]
    assert gpu_check._child("rate", "matmul:2:0") == {"rate": 3.0}  # one kind: as before


def test_the_infer_step_runs_whole_solo_and_paced_groups(gpu_check: ModuleType) -> None:
    class Checker:
        def __init__(self) -> None:
            self.runs: list[tuple[str, str, Any]] = []

        def env(self, **kw: Any) -> dict[str, Any]:
            return kw

        def rate(self, kind: str, **kw: Any) -> dict[str, Any]:
            self.runs.append(("rate", kind, kw))
            return _served(100.0, 800.0)

        def pair(self, kind: str, envs: list[dict[str, Any]], paced: bool) -> list[Any]:
            self.runs.append(("pair", kind, ([e["share"] for e in envs], paced)))
            return [_served(100.0 / len(envs), 800.0 / len(envs))] * len(envs)

    c = Checker()
    fig = gpu_check._infer(c)
    both = "infer_b1+infer_b32"
    assert c.runs == [
        ("rate", both, {"shim": False}),
        ("rate", both, {"share": "0.5"}),
        ("rate", both, {"share": "0.25"}),
        ("pair", both, (["0.5", "0.5"], True)),
        ("pair", both, (["0.25"] * 4, True)),
    ]
    assert fig["infer_b32"]["solo_0.25"]["of_whole"] == 1.0
    assert fig["infer_b1"]["4x0.25"]["of_solo"] == [0.25] * 4
