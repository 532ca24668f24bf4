"""The shim library: what it exports, both header modes, forwarding of unhooked symbols."""

from __future__ import annotations

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

CUDA_H = Path("/usr/local/cuda/include/cuda.h")
HOOKS = re.findall(r"^FGPU_HOOK\((cu\w+),", (SHIM_DIR / "src/hooks.def").read_text(), re.M)
FORWARDS = re.findall(r"^FGPU_FWD\((cu\w+)\)", (SHIM_DIR / "src/forward_list.h").read_text(), re.M)


def test_exports_hooks_and_forwards_and_nothing_else(kit: Kit) -> None:
    names = exports(kit.shim_lib / "libcuda.so.1")
    assert names == set(HOOKS) | set(FORWARDS)
    assert not set(HOOKS) & set(FORWARDS)
    assert {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable", "cuInit"} <= names
    assert len(FORWARDS) > 500  # the driver API, every variant


def test_soname_is_libcuda(kit: Kit) -> None:
    dyn = dynamic_section(kit.shim_lib / "libcuda.so.1")
    assert "Library soname: [libcuda.so.1]" in dyn
    assert "TEXTREL" not in dyn


def test_builds_without_cuda_h(kit: Kit, tmp_path: Path) -> None:
    lib = build_shim(tmp_path / "min", without_cuda_h=True)
    assert exports(lib / "libcuda.so.1") == exports(kit.shim_lib / "libcuda.so.1")


PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#ifdef REAL
#include <cuda.h>
#else
#include "cuda_min.h"
#endif
#define S(t) printf(#t " %zu\n", sizeof(t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(t, f))
#define V(c) printf(#c " %lld\n", (long long)(c))
int main(void) {
    S(CUmemAllocationProp); O(CUmemAllocationProp, location); O(CUmemAllocationProp, allocFlags);
    S(CUmemLocation); O(CUmemLocation, id);
    S(CUlaunchConfig); O(CUlaunchConfig, gridDimZ); O(CUlaunchConfig, hStream);
    O(CUlaunchConfig, numAttrs);
    S(CUDA_ARRAY_DESCRIPTOR); O(CUDA_ARRAY_DESCRIPTOR, Format);
    O(CUDA_ARRAY_DESCRIPTOR, NumChannels);
    S(CUDA_ARRAY3D_DESCRIPTOR); O(CUDA_ARRAY3D_DESCRIPTOR, Format);
    O(CUDA_ARRAY3D_DESCRIPTOR, Flags);
    S(CUdeviceptr); S(CUmemGenericAllocationHandle); S(CUresult);
    V(CUDA_ERROR_OUT_OF_MEMORY); V(CUDA_ERROR_NOT_FOUND); V(CUDA_ERROR_STUB_LIBRARY);
    V(CUDA_ERROR_NOT_READY); V(CU_MEM_LOCATION_TYPE_DEVICE); V(CU_STREAM_CAPTURE_STATUS_NONE);
    V(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM); V(CUDA_ARRAY3D_LAYERED);
    V(CUDA_ARRAY3D_CUBEMAP); V(CU_AD_FORMAT_HALF); V(CU_AD_FORMAT_SIGNED_INT8);
    return 0;
}
"""


@pytest.mark.skipif(not CUDA_H.exists(), reason="needs the toolkit's cuda.h")
def test_minimal_header_matches_cuda_h(tmp_path: Path) -> None:
    real, minimal = probe_outputs(
        tmp_path, PROBE, [["-DREAL", f"-I{CUDA_H.parent}"], [f"-I{SHIM_DIR / 'src'}"]]
    )
    assert real == minimal


@pytest.mark.skipif(not CUDA_H.exists(), reason="needs the toolkit's cuda.h")
def test_forward_list_is_current(tmp_path: Path) -> None:
    out = tmp_path / "forward_list.h"
    subprocess.run(
        ["python3", str(SHIM_DIR / "tools/gen_forward.py"), "cuda", str(CUDA_H.parent),
         str(SHIM_DIR / "src/hooks.def"), str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert out.read_text() == (SHIM_DIR / "src/forward_list.h").read_text()


def test_unhooked_exports_forward_to_the_driver(kit: Kit, state: Path) -> None:
    (r,) = kit.run("direct", env=kit.env(state=state, mem_limit="1G"))
    assert r["library"].startswith(str(kit.shim_lib))  # dlsym found the shim's trampoline
    assert (r["init"], r["version"], r["count"], r["name"]) == (0, 13000, 2, "Fake GPU")


def test_no_driver_is_a_stub_library_error(kit: Kit, state: Path, tmp_path: Path) -> None:
    for real in (str(tmp_path / "missing.so"), str(kit.shim_lib / "libcuda.so.1")):
        env = kit.env(state=state, FGPU_REAL_LIBCUDA=real)
        (r,) = kit.run("direct", env=env)
        assert r["init"] == r["version_rc"] == 34  # CUDA_ERROR_STUB_LIBRARY, no recursion
