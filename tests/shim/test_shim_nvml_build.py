"""The libnvidia-ml.so.1 stand-in as a library: exports, soname, its lists against nvml.h.

nvml.h is not needed to build or to run the other tests; where it is (the toolkit's
include folder, or $FGPU_NVML_INCLUDE: the PyPI package nvidia-nvml-dev ships one),
the forward list and nvml_min.h are checked against it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.shim_kit import (
    SHIM_DIR,
    Kit,
    build_shim,
    dynamic_section,
    exports,
    probe_outputs,
)

NVML_H = Path(os.environ.get("FGPU_NVML_INCLUDE", "/usr/local/cuda/include")) / "nvml.h"
needs_nvml_h = pytest.mark.skipif(
    not NVML_H.exists(), reason=f"needs nvml.h ({NVML_H}; set FGPU_NVML_INCLUDE)"
)
HOOKS = re.findall(
    r"^FGPU_NVML_HOOK\((nvml\w+),", (SHIM_DIR / "src/nvml_hooks.def").read_text(), re.M
)
FORWARDS = re.findall(
    r"^FGPU_FWD\((nvml\w+)\)", (SHIM_DIR / "src/nvml_forward_list.h").read_text(), re.M
)


def test_exports_hooks_and_forwards_and_nothing_else(kit: Kit) -> None:
    names = exports(kit.shim_lib / "libnvidia-ml.so.1")
    assert names == set(HOOKS) | set(FORWARDS)
    assert not set(HOOKS) & set(FORWARDS)
    versions = {"", "_v2", "_v3"}
    for lists in ("Compute", "Graphics", "MPSCompute"):
        assert {f"nvmlDeviceGet{lists}RunningProcesses{v}" for v in versions} <= set(HOOKS)
    assert {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"} <= set(HOOKS)
    assert {"nvmlInit_v2", "nvmlInit", "nvmlShutdown", "nvmlInternalGetExportTable"} <= names
    assert len(FORWARDS) > 300  # the whole public API


def test_soname_is_libnvidia_ml_and_both_names_are_installed(kit: Kit) -> None:
    dyn = dynamic_section(kit.shim_lib / "libnvidia-ml.so.1")
    assert "Library soname: [libnvidia-ml.so.1]" in dyn
    assert "TEXTREL" not in dyn
    assert "libcuda" not in dyn  # a library of its own: nvidia-smi loads no CUDA
    assert os.readlink(kit.shim_lib / "libnvidia-ml.so") == "libnvidia-ml.so.1"


def test_builds_without_cuda_h(kit: Kit, tmp_path: Path) -> None:
    lib = build_shim(tmp_path / "min", without_cuda_h=True)
    names = exports(lib / "libnvidia-ml.so.1")
    assert names == exports(kit.shim_lib / "libnvidia-ml.so.1")


@needs_nvml_h
def test_nvml_forward_list_is_current(tmp_path: Path) -> None:
    out = tmp_path / "nvml_forward_list.h"
    subprocess.run(
        ["python3", str(SHIM_DIR / "tools/gen_forward.py"), "nvml", str(NVML_H.parent),
         str(SHIM_DIR / "src/nvml_hooks.def"), str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert out.read_text() == (SHIM_DIR / "src/nvml_forward_list.h").read_text()


@needs_nvml_h
def test_hooks_match_nvml_h(tmp_path: Path) -> None:
    """The Makefile's compile-time check (nvml_hdrcheck.c), run against this nvml.h."""
    lib = build_shim(tmp_path / "b", nvml_include=NVML_H.parent)
    assert (lib.parent / "obj" / "nvml_hdrcheck.ok").exists()


PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#ifdef REAL
#include <nvml.h>
#else
#include "nvml_min.h"
#endif
#define S(t) printf(#t " %zu\n", sizeof(t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(t, f))
#define V(c) printf(#c " %lld\n", (long long)(c))
int main(void) {
    S(nvmlMemory_t); O(nvmlMemory_t, free); O(nvmlMemory_t, used);
    S(nvmlMemory_v2_t); O(nvmlMemory_v2_t, total); O(nvmlMemory_v2_t, reserved);
    O(nvmlMemory_v2_t, free); O(nvmlMemory_v2_t, used);
    S(nvmlProcessInfo_v1_t); O(nvmlProcessInfo_v1_t, usedGpuMemory);
    S(nvmlProcessInfo_v2_t); O(nvmlProcessInfo_v2_t, gpuInstanceId);
    O(nvmlProcessInfo_v2_t, computeInstanceId); S(nvmlProcessInfo_t);
    S(nvmlUtilization_t); O(nvmlUtilization_t, memory); S(nvmlReturn_t); S(nvmlDevice_t);
    V(nvmlMemory_v2); V(NVML_SUCCESS); V(NVML_ERROR_UNINITIALIZED);
    V(NVML_ERROR_INVALID_ARGUMENT); V(NVML_ERROR_NOT_SUPPORTED); V(NVML_ERROR_NOT_FOUND);
    V(NVML_ERROR_INSUFFICIENT_SIZE); V(NVML_ERROR_LIBRARY_NOT_FOUND);
    V(NVML_ERROR_FUNCTION_NOT_FOUND); V(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    V(NVML_ERROR_UNKNOWN);
    return 0;
}
"""


@needs_nvml_h
def test_minimal_header_matches_nvml_h(tmp_path: Path) -> None:
    real, minimal = probe_outputs(
        tmp_path, PROBE, [["-DREAL", f"-I{NVML_H.parent}"], [f"-I{SHIM_DIR / 'src'}"]]
    )
    assert real == minimal
