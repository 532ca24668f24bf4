"""What an agent is told at start: its id, what it offers, and how it runs and watches its
sessions. A leaf of the agent's modules: the agent (``services.actors.agent``) and its
helpers (``agent_usage``, ``agent_watch``) all read it, so none imports another for it."""

from dataclasses import dataclass, field

from events import GpuInfo, Slots
from services.domain.gpu_watch import WatchSettings

__all__ = ["AgentConfig"]


@dataclass(frozen=True)
class AgentConfig:
    agent_id: str
    capacity: Slots  # cpu and mem the agent offers; fgpu is derived from the GPUs
    gpus: tuple[GpuInfo, ...]
    fgpu_per_gpu: int  # quanta of fGPU one physical GPU is worth
    mock_gpus: bool = False  # declared GPUs: never ask the engine for devices
    runtime_name: str = "docker"
    stop_timeout_s: float = 5.0
    shim_lib_dir: str | None = None  # the built shim, mounted into every session's container
    usage_interval_s: float = 5.0  # how often usage samples are published per session
    oom_poll_s: float = 0.5  # how soon an out-of-memory refusal is published
    # How often the shares of the sessions sharing a GPU are scaled to what it delivers
    # (``agent_pacing``: with the driver's figures only).
    pace_interval_s: float = 0.25
    group: str = "default"  # the resource group it serves
    registry: str | None = None  # host:port it pulls the images it lacks from
    pull_report_s: float = 2.0  # a pull's progress on the log at most this often (or 10%)
    # Where the storage hosts' virtual folders are on this host (<root>/<host>/<id>);
    # None: this agent mounts none (no session that mounts one is placed here).
    vfolder_root: str | None = None
    # The storage hosts whose folders are under ``vfolder_root`` here; None: every one.
    storage_hosts: tuple[str, ...] | None = None
    # The pipe directory of the MPS control daemon of each GPU (host index) that has one
    # (``services.adapters.mps_daemon``); a session on one of them alone is its client.
    mps_pipes: tuple[tuple[int, str], ...] = ()
    # How the driver's figures of the sessions' processes are watched (with a GpuWatch).
    watch: WatchSettings = field(default_factory=WatchSettings)
