"""A session's container on a real engine finds the shim first, whatever the image's path.

CUDA images set LD_LIBRARY_PATH; a container's environment replaces the image's value, so
the agent's container puts the shim's folder in front of the image's own (read from the
image), and both stand-ins (libcuda.so.1, libnvidia-ml.so.1) are found there.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiodocker
import anyio
import pytest

from events import GpuInfo
from services.adapters.docker_runtime import DockerRuntime
from services.domain.container_spec import session_spec
from services.domain.gpu_slice import slices
from tests.support.docker_env import engine_problem, skip_or_fail
from tests.support.runtime_contract import DEADLINE_S, TEST_IMAGE
from tests.support.shim_container import shim_session
from tests.support.shim_kit import build_shim

pytestmark = [pytest.mark.docker, pytest.mark.anyio]
GIB = 1 << 30
CUDA_PATH = "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def cuda_like_image() -> AsyncIterator[str]:
    """TEST_IMAGE with LD_LIBRARY_PATH set as CUDA images set it (made offline, removed after)."""
    problem = engine_problem()
    if problem is not None:
        skip_or_fail(problem)
    name = f"fgpu/test-cuda-path:{uuid.uuid4().hex[:8]}"
    repo, tag = name.split(":")
    async with aiodocker.Docker() as docker:
        base = await docker.containers.create({"Image": TEST_IMAGE, "Cmd": ["true"]})
        try:
            await base.commit(
                repository=repo, tag=tag, changes=[f"ENV LD_LIBRARY_PATH={CUDA_PATH}"]
            )
        finally:
            await base.delete(force=True)
        try:
            yield name
        finally:
            await docker.images.delete(name, force=True)


async def test_the_shim_is_first_on_the_images_library_path(
    cuda_like_image: str, tmp_path: Path
) -> None:
    shim = build_shim(tmp_path / "shim")
    gpus = {0: GpuInfo(index=0, uuid="GPU-0", model="Fake", mem=16 * GIB, sm_count=1)}
    v = shim_session(cuda_like_image, 'echo "$LD_LIBRARY_PATH"; ls /opt/fgpu/lib')
    spec = session_spec(
        v, "nvmltest", slices(v.devices, gpus, 200), request_devices=False, shim_lib_dir=str(shim)
    )
    async with DockerRuntime() as rt:
        info = await rt.run(spec)
        try:
            with anyio.fail_after(DEADLINE_S):
                assert await rt.wait(info.id) == 0
            path, *listed = (await rt.logs(info.id)).split()
        finally:
            await rt.remove(info.id, stop_timeout_s=0)
    assert path == f"/opt/fgpu/lib:{CUDA_PATH}"
    assert {"libcuda.so.1", "libnvidia-ml.so.1"} <= set(listed)
