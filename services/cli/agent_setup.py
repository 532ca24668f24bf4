"""What running an agent needs, built from its options and file: its configuration, the
shim's regions, the container engine. Imported only by the commands that run an agent."""

import dataclasses
import os
import socket
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from events import GpuInfo, Slots
from events import subjects as subj
from services.actors.agent import AgentConfig
from services.adapters.gpu_probe import MockGpus, NvmlProbe
from services.adapters.shim_regions import ShimRegions, shim_lib_dir
from services.cli.options import HostProblem, fail, state_file, warn
from services.domain.resources import parse_cpu, parse_fgpu, parse_mem
from services.domain.tenancy.groups import DEFAULT_GROUP
from services.ports import ContainerRuntime, SliceRegions

if TYPE_CHECKING:
    from services.adapters.mps_daemon import MpsDaemons

__all__ = ["agent_config", "container_runtime", "mps_daemons", "with_regions"]


class MockGpuConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "MockGPU"
    mem: str = "16g"
    sm_count: int = Field(default=80, ge=1)


class AgentFile(BaseModel):
    """An agent's configuration file (TOML); command-line options override it."""

    model_config = ConfigDict(extra="forbid")
    agent_id: str | None = None
    fgpu_per_gpu: str | None = None
    cpu: str | None = None
    mem: str | None = None
    runtime: str | None = None
    group: str | None = None
    registry: str | None = None  # host:port to pull missing images from
    # Whose folders it mounts (default: every one; [] none: no session mounting one comes).
    storage_hosts: list[str] | None = None
    mock_gpus: list[MockGpuConfig] = []
    mps: str | None = None  # as --mps: "all" or GPU indexes, "0,1"


def with_regions(
    cfg: AgentConfig, shim_dir: str | None, no_shim: bool, regions_dir: str | None
) -> tuple[AgentConfig, SliceRegions | None]:
    """The agent's config with its shim, and the regions it enforces slices through."""
    if no_shim:
        return cfg, None
    shim = shim_dir or shim_lib_dir()
    if shim is None:
        warn("no shim built (make -C gpu_shim): slices are not enforced")
        return cfg, None
    if not Path(shim, "libcuda.so.1").exists():
        fail(f"--shim-dir {shim} has no libcuda.so.1 (build it: make -C gpu_shim)")
    root = regions_dir or str(state_file().parent / "regions" / cfg.agent_id)
    return dataclasses.replace(cfg, shim_lib_dir=str(Path(shim).resolve())), ShimRegions(root)


def _host_id() -> str:
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return name[:64] or "agent"


def _total_mem() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def agent_config(
    agent_id: str | None,
    mock_gpus: int,
    gpu_mem: str,
    fgpu_per_gpu: str | None,
    cpu: str | None,
    mem: str | None,
    runtime: str | None,
    config: Path | None,
    group: str | None = None,
    registry: str | None = None,
    mps: str | None = None,
) -> AgentConfig:
    """The agent's configuration from its file and options. Raises ValueError."""
    f = AgentFile()
    if config is not None:
        try:
            f = AgentFile.model_validate(tomllib.loads(config.read_text()))
        except (OSError, tomllib.TOMLDecodeError, ValueError) as e:
            raise ValueError(f"bad agent config {config}: {e}") from e
    aid = agent_id or f.agent_id or _host_id()
    group = group or f.group or DEFAULT_GROUP
    if not subj.is_token(group):
        raise ValueError(f"group {group!r} must be 1-64 letters, digits, '-' or '_'")
    gpus: list[GpuInfo]
    mock = True
    if mock_gpus > 0:
        gpus = MockGpus.uniform(
            mock_gpus, model="MockGPU", mem=parse_mem(gpu_mem), sm_count=80, prefix=f"{aid}-"
        ).gpus()
    elif f.mock_gpus:
        gpus = [
            GpuInfo(
                index=i,
                uuid=f"GPU-mock-{aid}-{i}",
                model=g.model,
                mem=parse_mem(g.mem),
                sm_count=g.sm_count,
            )
            for i, g in enumerate(f.mock_gpus)
        ]
    else:
        gpus, mock = NvmlProbe().gpus(), False
    return AgentConfig(
        agent_id=aid,
        capacity=Slots(
            cpu=parse_cpu(cpu or f.cpu or str(os.cpu_count() or 1)),
            mem=parse_mem(mem or f.mem or str(_total_mem())),
        ),
        gpus=tuple(gpus),
        fgpu_per_gpu=parse_fgpu(fgpu_per_gpu or f.fgpu_per_gpu or "1"),
        mock_gpus=mock,
        runtime_name=runtime or f.runtime or "docker",
        group=group,
        registry=_registry(registry or f.registry),
        storage_hosts=None if f.storage_hosts is None else tuple(f.storage_hosts),
        mps_pipes=_mps_pipes(mps or f.mps, gpus, mock, aid),
    )


def _mps_pipes(
    given: str | None, gpus: list[GpuInfo], mock: bool, agent_id: str
) -> tuple[tuple[int, str], ...]:
    """The pipe directory of each GPU (host index) --mps names: ``all`` or indexes
    ``0,1``; none without it. Raises ValueError for mock GPUs or an index it lacks."""
    if not given:
        return ()
    from services.adapters.mps_daemon import pipe_dir

    if mock:
        raise ValueError("--mps needs real GPUs: mock GPUs have no MPS")
    have = {g.index for g in gpus}
    if given.strip() == "all":
        chosen = sorted(have)
    else:
        try:
            chosen = sorted({int(i) for i in given.split(",")})
        except ValueError:
            raise ValueError(
                f"--mps must be 'all' or GPU indexes like 0,1, got {given!r}"
            ) from None
        if not set(chosen) <= have:
            raise ValueError(f"--mps {given}: this host's GPUs are {sorted(have)}")
    if not chosen:
        raise ValueError("--mps: this host has no GPU (NVML found none)")
    root = str(state_file().parent / "mps" / agent_id)
    return tuple((i, pipe_dir(root, i)) for i in chosen)


def mps_daemons(cfg: AgentConfig) -> "MpsDaemons | None":
    """The MPS daemons of the GPUs of ``cfg.mps_pipes``; None if it has MPS on none."""
    if not cfg.mps_pipes:
        return None
    from services.adapters.mps_daemon import MpsDaemons

    uuid = {g.index: g.uuid for g in cfg.gpus}
    return MpsDaemons({uuid[i]: pipe for i, pipe in cfg.mps_pipes})


def _registry(text: str | None) -> str | None:
    """``host[:port]`` of a registry, as an image reference starts with it (a host with a
    dot or a port, or ``localhost``, as Docker tells a registry from a path). Raises
    ValueError for anything else."""
    if text is None:
        return None
    from services.domain.image_ref import image_reference_problem

    looks_like_host = "." in text or ":" in text or text == "localhost"
    if "/" in text or not looks_like_host or image_reference_problem(f"{text}/x") is not None:
        raise ValueError(f"--registry must be host[:port], got {text!r}")
    return text


@asynccontextmanager
async def container_runtime(name: str) -> AsyncIterator[ContainerRuntime]:
    """The runtime ``name`` for the block, its engine answering. Raises HostProblem if
    it does not (before the block), ValueError for an unknown name."""
    if name == "docker":
        from services.adapters.docker_runtime import DockerRuntime
        from services.ports import RuntimeUnavailable

        async with DockerRuntime() as rt:
            try:
                await rt.ping()
            except RuntimeUnavailable as e:
                where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
                raise HostProblem(
                    f"no Docker engine answers at {where}: start one, or set DOCKER_HOST "
                    "to one (--runtime dummy runs no containers)"
                ) from e
            yield rt
    elif name == "dummy":
        from services.adapters.dummy_runtime import DummyRuntime

        yield DummyRuntime()
    else:
        raise ValueError(f"runtime must be docker or dummy, got {name!r}")
