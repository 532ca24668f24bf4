"""What the GPU driver itself counts of the host's processes, and whose container each is.

The shim in a container enforces its slice from inside; what the driver counts is the
truth a process inside cannot change (it may skip the shim, or lie in its counters). The
agent's watch reads it through ``GpuProcessWatch`` (NVML on a real host) and tells the
sessions' processes apart with ``ProcessContainers`` (the pid's cgroup names its
container). Both calls may block briefly: the watch runs them in a worker thread.
"""

from typing import Protocol

import msgspec

__all__ = [
    "GpuProcess",
    "GpuProcessWatch",
    "GpuUtilSample",
    "GpuWatchUnavailable",
    "ProcessContainers",
]


class GpuWatchUnavailable(Exception):
    """The driver could not be asked (no driver, a GPU lost, NVML failed): retryable, the
    next look may succeed."""


class GpuProcess(msgspec.Struct, frozen=True, kw_only=True):
    """One process holding memory on one GPU, as the driver counts it."""

    gpu_index: int  # the host's index of the GPU (NVML's: PCI order)
    pid: int  # in the host's pid namespace
    mem: int  # bytes the driver holds for it there, its CUDA context included


class GpuUtilSample(msgspec.Struct, frozen=True, kw_only=True):
    """The driver's sample of one process's use of one GPU's SMs."""

    gpu_index: int
    pid: int
    sm_percent: int  # 0-100: of the sample's period, how much its kernels ran
    at_us: int  # the driver's time of the sample, microseconds


class GpuProcessWatch(Protocol):
    """The host's GPUs, as their driver counts the processes using them."""

    def processes(self) -> list[GpuProcess]:
        """Every process with a compute context on any GPU of the host, with the memory
        the driver holds for it (0 when the driver cannot tell). Raises
        GpuWatchUnavailable."""
        ...

    def busy(self) -> dict[int, float]:
        """Each GPU's part (0..1) of the driver's last sample period in which a kernel
        ran, by the agent's GPU index. Raises GpuWatchUnavailable."""
        ...

    def utilisation(self) -> list[GpuUtilSample]:
        """The per-process SM samples the driver took since the last call (the first call:
        those it still holds). Raises GpuWatchUnavailable."""
        ...


class ProcessContainers(Protocol):
    """Which container a host process belongs to."""

    def containers_of(self, pid: int) -> tuple[str, ...]:
        """The ids of the containers whose cgroup holds ``pid`` (outermost first: a
        container in a container names both); () when it is in none, or gone."""
        ...
