"""GPU discovery: NVML on hosts with NVIDIA GPUs, or GPUs declared in the agent's config;
and the driver's own figures of the processes using them (``NvmlProcessWatch``)."""

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import structlog

from events import GpuInfo
from services.ports.gpu_watch import GpuProcess, GpuUtilSample, GpuWatchUnavailable

__all__ = ["MockGpus", "NvmlProbe", "NvmlProcessWatch"]

log = structlog.get_logger()


class NvmlProbe:
    """The host's NVIDIA GPUs through pynvml; none when NVML is missing (no driver)."""

    def gpus(self) -> list[GpuInfo]:
        try:
            import pynvml
        except ImportError:  # pragma: no cover - a dependency of the package
            return []
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            log.info("gpu_probe.no_nvml", error=str(e))
            return []
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
                try:
                    sm = int(pynvml.nvmlDeviceGetAttributes(h).multiprocessorCount)
                except pynvml.NVMLError:
                    sm = 0  # unknown: the SM share is still a fraction of whatever it has
                out.append(
                    GpuInfo(
                        index=i,
                        uuid=uuid if isinstance(uuid, str) else uuid.decode(),
                        model=name if isinstance(name, str) else name.decode(),
                        mem=int(mem),
                        sm_count=sm,
                    )
                )
            return out
        finally:
            pynvml.nvmlShutdown()


class NvmlProcessWatch:
    """GpuProcessWatch through pynvml: NVML is initialised at the first look and stays so
    until ``close``. Each GPU's compute and MPS client processes; per-process SM samples
    since the last look of each GPU."""

    def __init__(self) -> None:
        self._handles: list[Any] | None = None
        self._last_seen: dict[int, int] = {}  # per GPU, the newest sample's time (us)

    def _devices(self) -> list[Any]:
        if self._handles is None:
            import pynvml

            pynvml.nvmlInit()
            try:
                count = pynvml.nvmlDeviceGetCount()
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except pynvml.NVMLError:
                pynvml.nvmlShutdown()
                raise
        return self._handles

    def processes(self) -> list[GpuProcess]:
        """Raises GpuWatchUnavailable."""
        import pynvml

        lists: tuple[Callable[[Any], list[Any]], ...] = (
            pynvml.nvmlDeviceGetComputeRunningProcesses,
            pynvml.nvmlDeviceGetMPSComputeRunningProcesses,
        )
        held: dict[tuple[int, int], int] = {}
        with _nvml_call("list the GPUs' processes"):
            for i, h in enumerate(self._devices()):
                for listed in lists:
                    for p in listed(h):
                        mem = int(p.usedGpuMemory or 0)  # None: the driver cannot tell
                        held[(i, int(p.pid))] = max(mem, held.get((i, int(p.pid)), 0))
        return [GpuProcess(gpu_index=i, pid=pid, mem=mem) for (i, pid), mem in held.items()]

    def utilisation(self) -> list[GpuUtilSample]:
        """Raises GpuWatchUnavailable."""
        import pynvml

        out = []
        with _nvml_call("sample the GPUs' processes"):
            for i, h in enumerate(self._devices()):
                try:
                    samples = pynvml.nvmlDeviceGetProcessUtilization(h, self._last_seen.get(i, 0))
                except pynvml.NVMLError_NotFound:
                    continue  # no sample since the last look
                for s in samples:
                    out.append(
                        GpuUtilSample(
                            gpu_index=i, pid=s.pid, sm_percent=s.smUtil, at_us=s.timeStamp
                        )
                    )
                    self._last_seen[i] = max(self._last_seen.get(i, 0), int(s.timeStamp))
        return out

    def close(self) -> None:
        """Let NVML go (a later look initialises it again)."""
        if self._handles is not None:
            import pynvml

            self._handles = None
            pynvml.nvmlShutdown()


@contextmanager
def _nvml_call(what: str) -> Iterator[None]:
    """Where NVML's errors become GpuWatchUnavailable (the one place)."""
    import pynvml

    try:
        yield
    except pynvml.NVMLError as e:
        raise GpuWatchUnavailable(f"{what}: {e}") from e


class MockGpus:
    """GPUs declared in configuration, for tests and simulation; no device behind them."""

    def __init__(self, gpus: Sequence[GpuInfo]) -> None:
        self._gpus = list(gpus)

    @classmethod
    def uniform(
        cls, count: int, *, model: str, mem: int, sm_count: int, prefix: str = ""
    ) -> "MockGpus":
        return cls(
            [
                GpuInfo(
                    index=i, uuid=f"GPU-mock-{prefix}{i}", model=model, mem=mem, sm_count=sm_count
                )
                for i in range(count)
            ]
        )

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)
