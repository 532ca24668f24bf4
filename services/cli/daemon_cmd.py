"""``fgpu up`` (everything in one process) and ``fgpu agent|scheduler|quota`` (one each)."""

import dataclasses
import functools
import inspect
import os
import signal
import socket
import tomllib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from pydantic import BaseModel, ConfigDict, Field

from events import GpuInfo, Slots
from projections.paths import default_db_path
from services.actors.agent import AgentConfig
from services.adapters import nats_server
from services.adapters.gpu_probe import MockGpus, NvmlProbe
from services.adapters.shim_regions import ShimRegions, shim_lib_dir
from services.cli.options import Settings, console, fail, resolve_nats, run_async, tune_gc
from services.cli.stack import (
    StackInfo,
    connected,
    run_agent,
    run_agent_host,
    run_quota,
    run_scheduler,
    state_file,
)
from services.domain.resources import parse_cpu, parse_fgpu, parse_mem
from services.ports import ContainerRuntime, SliceRegions

__all__ = ["AgentOptions", "register"]


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
    mock_gpus: list[MockGpuConfig] = []


AgentIdOpt = Annotated[str | None, typer.Option(help="This agent's id (default: host name).")]
MockOpt = Annotated[
    int, typer.Option(help="Declare N mock GPUs instead of discovering them with NVML.")
]
GpuMemOpt = Annotated[str, typer.Option(help="Memory of each mock GPU.")]
RatioOpt = Annotated[
    str | None, typer.Option(help="fGPU one physical GPU is worth (admin setting; default 1).")
]
CpuOpt = Annotated[str | None, typer.Option(help="CPU cores offered (default: all).")]
MemOpt = Annotated[str | None, typer.Option(help="Memory offered (default: all).")]
RuntimeOpt = Annotated[
    str | None, typer.Option(help="docker (default) or dummy (instant fake, for simulation).")
]
ConfigOpt = Annotated[Path | None, typer.Option(help="Agent configuration file (TOML).")]
ShimOpt = Annotated[
    str | None,
    typer.Option(help="Directory of the built shim (libcuda.so.1); default: gpu_shim/build/lib."),
]
NoShimOpt = Annotated[bool, typer.Option("--no-shim", help="Do not enforce slices with the shim.")]
RegionsOpt = Annotated[
    str | None,
    typer.Option(help="Where the shim's per-session regions live (default: $FGPU_HOME/regions)."),
]


@dataclasses.dataclass(frozen=True)
class AgentOptions:
    """The command-line options of a command that runs an agent (``fgpu up``, ``fgpu agent``),
    listed once: ``_with_agent_options`` puts them on each such command."""

    agent_id: AgentIdOpt = None
    mock_gpus: MockOpt = 0
    gpu_mem: GpuMemOpt = "16g"
    fgpu_per_gpu: RatioOpt = None
    cpu: CpuOpt = None
    mem: MemOpt = None
    runtime: RuntimeOpt = None
    config: ConfigOpt = None
    shim_dir: ShimOpt = None
    no_shim: NoShimOpt = False
    regions_dir: RegionsOpt = None

    def setup(self) -> tuple[AgentConfig, SliceRegions | None]:
        """The agent's configuration and regions; a clear error if an option is bad."""
        try:
            cfg = agent_config(
                self.agent_id, self.mock_gpus, self.gpu_mem, self.fgpu_per_gpu,
                self.cpu, self.mem, self.runtime, self.config,
            )  # fmt: skip
        except ValueError as e:
            fail(str(e))
        return _regions(cfg, self.shim_dir, self.no_shim, self.regions_dir)


def _with_agent_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command``, whose ``agent: AgentOptions`` parameter is given on the command line as
    AgentOptions' fields, each an option of its own (they come first in ``--help``)."""
    fields = dataclasses.fields(AgentOptions)
    keyword = inspect.Parameter.KEYWORD_ONLY
    own = inspect.signature(command)
    params = [
        inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type) for f in fields
    ] + [p.replace(kind=keyword) for p in own.parameters.values() if p.name != "agent"]

    @functools.wraps(command)
    def with_options(**given: Any) -> None:
        command(agent=AgentOptions(**{f.name: given.pop(f.name) for f in fields}), **given)

    with_options.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    return with_options


def _regions(
    cfg: AgentConfig, shim_dir: str | None, no_shim: bool, regions_dir: str | None
) -> tuple[AgentConfig, SliceRegions | None]:
    """The agent's config with its shim, and the regions it enforces slices through."""
    if no_shim:
        return cfg, None
    shim = shim_dir or shim_lib_dir()
    if shim is None:
        console.print("[yellow]no shim built (make -C gpu_shim): slices are not enforced[/]")
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
) -> AgentConfig:
    """The agent's configuration from its file and options. Raises ValueError."""
    f = AgentFile()
    if config is not None:
        try:
            f = AgentFile.model_validate(tomllib.loads(config.read_text()))
        except (OSError, tomllib.TOMLDecodeError, ValueError) as e:
            raise ValueError(f"bad agent config {config}: {e}") from e
    aid = agent_id or f.agent_id or _host_id()
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
    )


@asynccontextmanager
async def _runtime(name: str) -> AsyncIterator[ContainerRuntime]:
    if name == "docker":
        from services.adapters.docker_runtime import DockerRuntime

        async with DockerRuntime() as rt:
            yield rt
    elif name == "dummy":
        from services.adapters.dummy_runtime import DummyRuntime

        yield DummyRuntime()
    else:
        raise ValueError(f"runtime must be docker or dummy, got {name!r}")


async def _until_signalled(tg: anyio.abc.TaskGroup) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            tg.cancel_scope.cancel()
            return


def register(app: typer.Typer) -> None:
    @app.command()
    @_with_agent_options
    def up(
        agent: AgentOptions,
        store: Annotated[
            str | None, typer.Option(help="JetStream store directory (default: temporary).")
        ] = None,
        port: Annotated[int | None, typer.Option(help="NATS port (default: a free one).")] = None,
        api_port: Annotated[
            int, typer.Option(help="Port of the read API and console (0: a free one).")
        ] = 0,
        no_api: Annotated[
            bool, typer.Option("--no-api", help="No projector, no read API.")
        ] = False,
    ) -> None:
        """Start an embedded NATS server and every actor in this process, until Ctrl-C."""
        cfg, regions = agent.setup()
        try:
            server = nats_server.start(store, port)
        except nats_server.NatsServerError as e:
            fail(str(e))
        info = StackInfo(server.url, server.store_dir, cfg.agent_id, os.getpid())
        info.save()
        console.print(f"[bold]fgpu up[/]  NATS {server.url}  (JetStream store {server.store_dir})")
        console.print(
            f"  agent {cfg.agent_id}: {len(cfg.gpus)} GPU(s)"
            f"{' (mock)' if cfg.mock_gpus else ''}, 1 GPU = "
            f"{cfg.fgpu_per_gpu / 100:g} fGPU, runtime {cfg.runtime_name}"
        )
        console.print(f"  state file {state_file()}  (other fgpu commands find NATS there)")

        async def main() -> None:
            async with (
                connected(server.url, "fgpu-up") as conn,
                _runtime(cfg.runtime_name) as rt,
                anyio.create_task_group() as tg,
            ):
                # The server is this process's own: it is its administrator too.
                await conn.log.create_or_update_stream()
                tg.start_soon(_until_signalled, tg)
                await tg.start(run_quota, conn.log)
                await tg.start(run_scheduler, conn.log, conn.bus)
                await tg.start(run_agent, conn, rt, cfg, regions)
                if not no_api:
                    from services.api.serve import serve_read_api  # heavy: only when serving

                    # The projections live with the log they project: a new store, a new file.
                    db = default_db_path(Path(server.store_dir))
                    api = await tg.start(serve_read_api, conn.log, db, "127.0.0.1", api_port)
                    info.api_url = api.url
                    info.save()
                    console.print(f"  read API {api.api}  (OpenAPI {api.openapi})", highlight=False)
                    console.print(f"  console  {api.console}", highlight=False)
                console.print("[green]ready[/]  (Ctrl-C to stop)", highlight=False)

        try:
            tune_gc()
            run_async(main)
        finally:
            server.stop()
            if state_file().exists():
                state_file().unlink()
            console.print("fgpu up: stopped")

    @app.command("agent")
    @_with_agent_options
    def agent_cmd(ctx: typer.Context, agent: AgentOptions) -> None:
        """Run one agent against --nats URL: it runs the sessions placed on this node."""
        cfg, regions = agent.setup()
        url = _url(ctx)

        async def main() -> None:
            async with (
                connected(url, f"fgpu-agent-{cfg.agent_id}") as conn,
                _runtime(cfg.runtime_name) as rt,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(_until_signalled, tg)
                await tg.start(run_agent, conn, rt, cfg, regions)
                console.print(f"agent {cfg.agent_id} ready on {url}")

        tune_gc()
        run_async(main)

    sim = typer.Typer(help="Simulation at scale with the dummy runtime (never the default).")
    app.add_typer(sim, name="sim")

    @sim.command("agents")
    def sim_agents(
        ctx: typer.Context,
        count: Annotated[int, typer.Option(min=1, help="How many agents.")] = 1000,
        gpus: Annotated[int, typer.Option(min=1, help="Mock GPUs per agent.")] = 4,
        gpu_mem: GpuMemOpt = "80g",
        fgpu_per_gpu: Annotated[str, typer.Option(help="fGPU per GPU.")] = "4",
        prefix: Annotated[str, typer.Option(help="Agent ids are PREFIX-N.")] = "sim",
        start_delay: Annotated[
            float, typer.Option(help="Seconds a container takes to start.")
        ] = 0.0,
    ) -> None:
        """Run COUNT simulated agents (dummy runtime: containers start instantly)."""
        from services.adapters.dummy_runtime import DummyRuntime

        url = _url(ctx)
        ratio = parse_fgpu(fgpu_per_gpu)
        configs = [
            AgentConfig(
                agent_id=f"{prefix}-{n}",
                capacity=Slots(cpu=256_000, mem=2048 << 30),
                gpus=tuple(
                    MockGpus.uniform(
                        gpus, model="SimGPU", mem=parse_mem(gpu_mem), sm_count=132
                    ).gpus()
                ),
                fgpu_per_gpu=ratio,
                mock_gpus=True,
                runtime_name="dummy",
            )
            for n in range(count)
        ]

        async def main() -> None:
            async with (
                connected(url, f"fgpu-sim-{prefix}") as conn,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(_until_signalled, tg)
                await tg.start(
                    run_agent_host, conn, configs, lambda: DummyRuntime(start_delay_s=start_delay)
                )
                console.print(f"{count} simulated agents ready on {url}")

        tune_gc()
        run_async(main)

    @app.command()
    def scheduler(ctx: typer.Context) -> None:
        """Run the scheduler against --nats URL."""
        _single(_url(ctx), "scheduler")

    @app.command()
    def quota(ctx: typer.Context) -> None:
        """Run the quota actor against --nats URL."""
        _single(_url(ctx), "quota")


def _url(ctx: typer.Context) -> str:
    settings: Settings = ctx.obj
    return resolve_nats(settings.nats)


def _single(url: str, which: str) -> None:
    async def main() -> None:
        async with connected(url, f"fgpu-{which}") as conn, anyio.create_task_group() as tg:
            tg.start_soon(_until_signalled, tg)
            if which == "scheduler":
                await tg.start(run_scheduler, conn.log, conn.bus)
            else:
                await tg.start(run_quota, conn.log)
            console.print(f"{which} ready on {url}")

    tune_gc()
    run_async(main)
