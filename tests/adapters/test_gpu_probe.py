"""NvmlProbe against the fake NVML and the fake CUDA driver of tests/shim, in a child process
that finds them on its library path (pynvml and ctypes open them by name), through the
module's own entry (``python -m services.adapters.gpu_probe``, which a check on a real GPU
runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.shim_kit import ROOT, build_fake, build_fake_nvml


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The directories of the fake libnvidia-ml.so.1 and the fake libcuda.so.1."""
    base = tmp_path_factory.mktemp("probe")
    return build_fake_nvml(base / "nvml").parent, build_fake(base / "cuda").parent


def probe(lib_dirs: list[Path], *args: str, **fake: str) -> tuple[list[dict[str, Any]], str]:
    """The GPUs the probe's entry prints, and what it logged, with ``fake`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.update(PYTHONPATH=str(ROOT), LD_LIBRARY_PATH=":".join(map(str, lib_dirs)), **fake)
    cmd = [sys.executable, "-m", "services.adapters.gpu_probe", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout  # one JSON line: logs go to stderr
    return json.loads(lines[0]), done.stderr


def test_gpus_in_pci_order_with_the_drivers_sm_count(fakes: tuple[Path, Path]) -> None:
    # NVML lists bus 2 first; the CUDA driver's device 0 is bus 1 (132 SMs), 1 is bus 2.
    gpus, _ = probe(
        list(fakes), FAKE_NVML_BUSES="2,1", FAKE_CUDA_DEVICES="2", FAKE_CUDA_SM_COUNTS="132,114"
    )
    assert [(g["index"], g["uuid"], g["sm_count"]) for g in gpus] == [
        (0, "GPU-fake-bus-01", 132),
        (1, "GPU-fake-bus-02", 114),
    ]
    assert {g["model"] for g in gpus} == {"Fake GPU"}
    assert all(g["mem"] == 16 << 30 for g in gpus)


def test_no_cuda_driver_leaves_the_count_unknown_and_says_so(fakes: tuple[Path, Path]) -> None:
    nvml_dir, _ = fakes
    gpus, logged = probe([nvml_dir], "/nowhere/libcuda.so.1", FAKE_NVML_DEVICES="1")
    assert [(g["uuid"], g["sm_count"]) for g in gpus] == [("GPU-fake-bus-01", 0)]
    assert "gpu_probe.no_cuda" in logged


def test_a_gpu_the_driver_does_not_know_keeps_no_count(fakes: tuple[Path, Path]) -> None:
    # NVML has three GPUs, the driver two (buses 1 and 2): bus 3's count stays unknown.
    gpus, logged = probe(list(fakes), FAKE_NVML_DEVICES="3", FAKE_CUDA_DEVICES="2")
    assert [g["sm_count"] for g in gpus] == [80, 80, 0]
    assert "gpu_probe.no_sm_count" in logged and "00000000:03:00.0" in logged


def test_no_nvml_finds_no_gpu(fakes: tuple[Path, Path]) -> None:
    gpus, _ = probe(list(fakes), FAKE_NVML_NO_DRIVER="1")
    assert gpus == []
