"""Builds and drives the shim against the fake driver: shared by tests/shim and bench/shim.py.

The shim is built with its own Makefile, the fake libcuda.so.1 (fake_cuda/) and
the cudart-like harness (harness/) with the system C compiler.  Every harness
run gets an environment that puts the shim first on LD_LIBRARY_PATH and
points it at the fake driver by absolute path.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SHIM_DIR = ROOT / "gpu_shim"
HERE = Path(__file__).resolve().parent
CC = os.environ.get("CC", "cc")
GIB = 1 << 30
MIB = 1 << 20


def build_shim(build: Path, *, without_cuda_h: bool = False) -> Path:
    """make -C gpu_shim into build; returns the directory holding libcuda.so.1 (the shim)."""
    cmd = ["make", "-s", "-j2", "-C", str(SHIM_DIR), f"BUILD={build}"]
    if without_cuda_h:
        cmd.append("FGPU_NO_CUDA_H=1")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return build / "lib"


def build_fake(out_dir: Path) -> Path:
    """The fake driver, soname libcuda.so.1, binding its own symbols to itself."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / "libcuda.so.1"
    subprocess.run(
        [CC, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
         "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1", f"-I{SHIM_DIR / 'src'}",
         "-o", str(lib), str(HERE / "fake_cuda" / "fake_cuda.c"), "-pthread"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return lib


def build_harness(out: Path) -> Path:
    subprocess.run(
        [CC, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{SHIM_DIR / 'src'}",
         "-o", str(out), str(HERE / "harness" / "harness.c"), "-ldl"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out


@dataclass(frozen=True)
class Kit:
    """Built artefacts: the shim's lib dir, the fake driver, the harness."""

    shim_lib: Path
    fake: Path
    harness: Path

    def env(
        self,
        *,
        state: Path,
        region: Path | None = None,
        mem_limit: str | None = None,
        sm_share: str | None = None,
        tenant: int = 0,
        total_mem: int = 16 * GIB,
        **extra: str,
    ) -> dict[str, str]:
        """Environment of one process of a container (region = the container's region)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FGPU_", "FAKE_CUDA_"))}
        env["LD_LIBRARY_PATH"] = str(self.shim_lib)
        env["FGPU_REAL_LIBCUDA"] = str(self.fake)
        env["FAKE_CUDA_STATE"] = str(state)
        env["FAKE_CUDA_TOTAL_MEM"] = str(total_mem)
        env["FAKE_CUDA_TENANT"] = str(tenant)
        if region is not None:
            env["FGPU_REGION"] = str(region)
        if mem_limit is not None:
            env["FGPU_MEM_LIMIT"] = mem_limit
        if sm_share is not None:
            env["FGPU_SM_SHARE"] = sm_share
        env.update(extra)
        return env

    def run(self, *args: str, env: dict[str, str], timeout: float = 60) -> list[dict[str, Any]]:
        """Run the harness to completion; its JSON lines.  Raises on a non-zero exit."""
        proc = subprocess.run(
            [str(self.harness), *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"harness {args} exited {proc.returncode}: {proc.stdout} {proc.stderr}"
            )
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    def start(self, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
        """Start the harness in the background, stdout piped line by line."""
        return subprocess.Popen(
            [str(self.harness), *args], env=env, stdout=subprocess.PIPE, text=True, bufsize=1
        )


@contextmanager
def running(kit: Kit, *args: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A background harness, killed (if still running) and reaped on exit."""
    proc = kit.start(*args, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def read_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The next JSON line of a running harness (blocks until it prints one)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"harness ended early (exit {proc.wait()})")
    return dict(json.loads(line))


# struct fake_shared of fake_cuda.c
_FAKE = struct.Struct("<IIQ4Q4Q8Q8Q")


@dataclass(frozen=True)
class FakeDevice:
    """A snapshot of the fake GPU's shared state."""

    launches: int
    in_use: tuple[int, ...]
    peak: tuple[int, ...]
    busy_ns: tuple[int, ...]
    kernels: tuple[int, ...]

    @classmethod
    def read(cls, path: Path) -> FakeDevice:
        with path.open("rb") as f, mmap.mmap(f.fileno(), _FAKE.size, prot=mmap.PROT_READ) as m:
            v = _FAKE.unpack_from(m)
        return cls(
            launches=v[2],
            in_use=tuple(v[3:7]),
            peak=tuple(v[7:11]),
            busy_ns=tuple(v[11:19]),
            kernels=tuple(v[19:27]),
        )
