"""A hostile tenant cannot raise its slice from inside its container (issue 19, item 2).

A real container on a real engine, as the agent makes it (``session_spec`` over a region
of ``ShimRegions``), runs the shim against the fake driver. Inside, the tenant's tool looks
for its slice's numbers (4 GiB, 0.25 of the SMs) in every file the shim reads and
overwrites them every way it can; then a process asks the shim for more than the slice.
The slice is a read-only file of its own: every attempt fails, the allocation is refused,
and the agent still reads the slice it wrote. As root in the container (the read-only
mount holds) and as an unprivileged user (the counters' group lets it keep the budget).

The container image has no C library: the host's, which the test programs need, are
mounted read-only at their own paths.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiodocker
import anyio
import msgspec
import pytest

from events import GpuInfo
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.shim_regions import ShimRegions
from services.domain.container_spec import (
    REGION_IN_CONTAINER,
    SLICE_IN_CONTAINER,
    Mount,
    session_spec,
)
from services.domain.gpu_slice import slices
from tests.support.docker_env import engine_problem, skip_or_fail
from tests.support.runtime_contract import DEADLINE_S, TEST_IMAGE
from tests.support.shim_container import shim_session
from tests.support.shim_kit import GIB, build_fake, build_harness, build_shim, build_tamper

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

TOOLS = "/opt/fgpu-test"  # the test's programs and the fake driver, in the container
LIMIT = 4 * GIB  # a quarter of a 16 GiB device: 0.5 fGPU at 2 fGPU per GPU
SHARE_PPM = 250_000
RAISED_LIMIT, RAISED_PPM = 64 * GIB, 1_000_000
NOBODY = "65534:65534"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["root", NOBODY])
async def image(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """TEST_IMAGE, run as root or as an unprivileged user (made offline, removed after)."""
    problem = engine_problem()
    if problem is not None:
        skip_or_fail(problem)
    name = f"fgpu/test-tenant:{uuid.uuid4().hex[:8]}"
    await anyio.to_thread.run_sync(_tenant_image, name, str(request.param))
    try:
        yield name
    finally:
        async with aiodocker.Docker() as docker:
            await docker.images.delete(name, force=True)


def _tenant_image(name: str, user: str) -> None:
    """TEST_IMAGE's files as image ``name`` whose processes run as ``user``, its root
    directory open to every user (TEST_IMAGE's is 0700, as its rootfs was made; a commit
    does not carry a change of it, an import of the files does)."""
    docker = ["docker"]
    made = subprocess.run([*docker, "create", TEST_IMAGE, "true"], **_CHECKED)
    cid = made.stdout.decode().strip()
    try:
        exported = subprocess.run([*docker, "export", cid], **_CHECKED).stdout
    finally:
        subprocess.run([*docker, "rm", cid], **_CHECKED)
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(exported)) as files,
        tarfile.open(fileobj=out, mode="w") as tar,
    ):
        root = tarfile.TarInfo(".")
        root.type, root.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(root)
        for m in files.getmembers():
            tar.addfile(m, files.extractfile(m) if m.isfile() else None)
    change = ["--change", f"USER {user}"]
    subprocess.run([*docker, "import", *change, "-", name], input=out.getvalue(), **_CHECKED)


_CHECKED: dict[str, Any] = {"check": True, "capture_output": True, "timeout": 120}


def _host_libraries(*programs: Path) -> tuple[Mount, ...]:
    """The host's shared libraries (and loader) ``programs`` need, each mounted read-only
    at its own path."""
    needed: set[str] = set()
    for program in programs:
        out = subprocess.run(["ldd", str(program)], check=True, capture_output=True, text=True)
        for line in out.stdout.splitlines():
            words = line.split()
            path = words[2] if "=>" in words and len(words) > 2 else words[0]
            if path.startswith("/"):
                needed.add(path)
    return tuple(Mount(source=p, target=p, read_only=True) for p in sorted(needed))


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def test_the_tenant_cannot_raise_its_slice_and_the_shim_refuses_beyond_it(
    image: str, tmp_path: Path
) -> None:
    tools = tmp_path / "tools"
    shim = build_shim(tmp_path / "shim")
    fake = build_fake(tools / "fake")
    harness = build_harness(tools / "harness")
    tamper = build_tamper(tools / "tamper")
    for d in (tools, tools / "fake", shim):
        d.chmod(0o755)  # the container's user reads them through the bind mount
    files = f"{REGION_IN_CONTAINER} {SLICE_IN_CONTAINER}"
    script = (
        f"{TOOLS}/tamper {LIMIT} {RAISED_LIMIT} {SHARE_PPM} {RAISED_PPM} {files};"
        f" {TOOLS}/harness used {LIMIT + GIB}"
    )
    v = shim_session(image, script, fgpu=50)
    gpus = {0: GpuInfo(index=0, uuid="GPU-0", model="Fake", mem=16 * GIB, sm_count=1)}
    regions = ShimRegions(str(tmp_path / "regions"))
    region = regions.create(v.session_id, [LIMIT], [SHARE_PPM])
    spec = session_spec(
        v, "tenanttest", slices(v.devices, gpus, 200), request_devices=False,
        shim_lib_dir=str(shim), region_path=region, region_group=regions.group,
    )  # fmt: skip
    spec = msgspec.structs.replace(
        spec,
        env={
            **spec.env,
            "FGPU_REAL_LIBCUDA": f"{TOOLS}/fake/libcuda.so.1",
            "FAKE_CUDA_STATE": "/tmp/fake-gpu",
            "FAKE_CUDA_TOTAL_MEM": str(16 * GIB),
        },
        mounts=(
            *spec.mounts,
            Mount(source=str(tools), target=TOOLS, read_only=True),
            *_host_libraries(harness, tamper, fake, shim / "libcuda.so.1"),
        ),
    )
    async with DockerRuntime() as rt:
        info = await rt.run(spec)
        try:
            with anyio.fail_after(DEADLINE_S):
                assert await rt.wait(info.id) == 0
            out = await rt.logs(info.id)
        finally:
            await rt.remove(info.id, stop_timeout_s=0)
    lines = _lines(out)
    tried = [r for r in lines if "way" in r]
    assert tried, out
    # Nothing the tenant tried changed a number of its slice, anywhere.
    assert [r for r in tried if r["replaced"]] == []
    # The slice's file could not be changed at all, by any way.
    assert all(r["errno"] != 0 for r in tried if r["file"] == SLICE_IN_CONTAINER), tried
    (alloc,) = [r["alloc"] for r in lines if "alloc" in r]
    assert alloc == 2  # CUDA_ERROR_OUT_OF_MEMORY: beyond the slice
    (info_line,) = [r for r in lines if "meminfo" in r]
    assert info_line["total"] == LIMIT
    # What the agent reads (and the audit shows) is still the slice it wrote.
    ((dev, limit, _),) = [(d.index, d.mem_limit, d.mem_used) for d in regions.sample(v.session_id)]
    assert (dev, limit) == (0, LIMIT)
    regions.remove(v.session_id)
