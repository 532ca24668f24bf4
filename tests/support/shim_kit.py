"""Builds and drives the shim against fake libraries: shared by tests/shim and bench/shim.py.

The shim is built with its own Makefile, the fake libcuda.so.1 (fake_cuda/),
the cudart-like harness (harness/), the fake libnvidia-ml.so.1 (fake_nvml/)
and the nvidia-smi-like client (nvml_client/) with the system C compiler.
Every run gets an environment that puts the shim first on LD_LIBRARY_PATH and
points it at the fake libraries by absolute path.
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
HERE = ROOT / "tests" / "shim"  # the fake libraries and drivers it builds
CC = os.environ.get("CC", "cc")
GIB = 1 << 30
MIB = 1 << 20


def build_shim(
    build: Path, *, without_cuda_h: bool = False, nvml_include: Path | None = None
) -> Path:
    """make -C gpu_shim into build; returns the directory holding libcuda.so.1 and
    libnvidia-ml.so.1 (the shim).  nvml_include: where nvml.h is, for the header check."""
    cmd = ["make", "-s", "-j2", "-C", str(SHIM_DIR), f"BUILD={build}"]
    if without_cuda_h:
        cmd.append("FGPU_NO_CUDA_H=1")
    if nvml_include is not None:
        cmd.append(f"NVML_INCLUDE={nvml_include}")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return build / "lib"


def _cc(out: Path, sources: list[Path], *flags: str) -> Path:
    """Compile sources into out with the shim's warnings and headers."""
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [CC, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{SHIM_DIR / 'src'}",
         "-o", str(out), *map(str, sources), *flags],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out


def _fake_lib(out: Path, source: Path) -> Path:
    """A fake library named (and sonamed) out.name, binding its own symbols to itself."""
    return _cc(out, [source], "-fPIC", "-shared", "-Wl,-Bsymbolic", f"-Wl,-soname,{out.name}",
               "-pthread")  # fmt: skip


def build_fake(out_dir: Path) -> Path:
    """The fake driver, soname libcuda.so.1."""
    return _fake_lib(out_dir / "libcuda.so.1", HERE / "fake_cuda" / "fake_cuda.c")


def build_harness(out: Path) -> Path:
    return _cc(out, [HERE / "harness" / "harness.c"], "-ldl")


def run_json(
    exe: Path, args: tuple[str, ...], env: dict[str, str], timeout: float
) -> list[dict[str, Any]]:
    """Run exe to completion; its JSON lines.  Raises on a non-zero exit."""
    proc = subprocess.run(
        [str(exe), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{exe.name} {args} exited {proc.returncode}: {proc.stdout} {proc.stderr}"
        )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def exports(lib: Path) -> set[str]:
    """The symbols lib defines for others (nm -D)."""
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def dynamic_section(lib: Path) -> str:
    """readelf -d of lib: soname, needed libraries, flags."""
    return subprocess.run(
        ["readelf", "-d", str(lib)], check=True, capture_output=True, text=True
    ).stdout


def probe_outputs(tmp: Path, source: str, flag_sets: list[list[str]]) -> list[bytes]:
    """source compiled and run once per set of compiler flags: what each printed."""
    src = tmp / "probe.c"
    src.write_text(source)
    outputs: list[bytes] = []
    for flags in flag_sets:
        exe = tmp / f"probe{len(outputs)}"
        subprocess.run([CC, *flags, "-o", str(exe), str(src)], check=True, capture_output=True)
        outputs.append(subprocess.run([str(exe)], check=True, capture_output=True).stdout)
    return outputs


def build_tamper(out: Path) -> Path:
    """The hostile tenant's tool: overwrites a slice's numbers in any file it can."""
    return _cc(out, [HERE / "tamper" / "tamper.c"])


def build_fake_nvml(out_dir: Path) -> Path:
    """The fake NVML, soname libnvidia-ml.so.1."""
    return _fake_lib(out_dir / "libnvidia-ml.so.1", HERE / "fake_nvml" / "fake_nvml.c")


def build_nvml_client(out: Path) -> Path:
    """The nvidia-smi-like client; it links the region code to write test epochs."""
    return _cc(out, [HERE / "nvml_client" / "nvml_client.c", SHIM_DIR / "src" / "region.c"], "-ldl")


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
        # No real NVML unless a test gives one (NvmlKit.env): contexts are then charged
        # FGPU_CTX_BYTES, never measured on whatever GPU the test machine has.
        env["FGPU_REAL_LIBNVML"] = "/nonexistent/libnvidia-ml.so.1"
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
        return run_json(self.harness, args, env, timeout)

    def start(self, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
        """Start the harness in the background, stdout piped line by line."""
        return subprocess.Popen(
            [str(self.harness), *args], env=env, stdout=subprocess.PIPE, text=True, bufsize=1
        )


@dataclass(frozen=True)
class NvmlKit:
    """The NVML side: the fake libnvidia-ml.so.1 and the nvidia-smi-like client."""

    fake: Path
    client: Path

    def env(self, base: dict[str, str], *, devices: int = 2, **extra: str) -> dict[str, str]:
        """base (a Kit.env) plus the fake NVML as the real one."""
        env = {k: v for k, v in base.items() if not k.startswith("FAKE_NVML_")}
        env["FGPU_REAL_LIBNVML"] = str(self.fake)
        env["FAKE_NVML_DEVICES"] = str(devices)
        env.update(extra)
        return env

    def run(self, *args: str, env: dict[str, str], timeout: float = 60) -> list[dict[str, Any]]:
        """Run the client to completion; its JSON lines.  Raises on a non-zero exit."""
        return run_json(self.client, args, env, timeout)


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
_FAKE = struct.Struct("<IIQ4Q4Q8Q8QQI")


@dataclass(frozen=True)
class FakeDevice:
    """A snapshot of the fake GPU's shared state."""

    launches: int
    in_use: tuple[int, ...]
    peak: tuple[int, ...]
    busy_ns: tuple[int, ...]
    kernels: tuple[int, ...]
    held_ns: int

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
            held_ns=v[27],
        )
