"""GPU discovery: NVML on hosts with NVIDIA GPUs, or GPUs declared in the agent's config."""

from collections.abc import Sequence

import structlog

from events import GpuInfo

__all__ = ["MockGpus", "NvmlProbe"]

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
