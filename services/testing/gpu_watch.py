"""Stand-ins for the driver's figures of the host's processes and for their cgroups: what a
test says, as the agent's watch would read it from NVML and ``/proc``. They pass the same
contract as the real adapters (``tests/adapters/test_gpu_watch_adapters.py``)."""

from services.ports.gpu_watch import GpuProcess, GpuUtilSample, GpuWatchUnavailable

__all__ = ["FakeContainers", "FakeGpuWatch"]


class FakeGpuWatch:
    """GpuProcessWatch over figures a test sets: ``hold`` and ``release`` a process's
    memory, ``sample`` its SM use (handed out once, at the next ``utilisation``),
    ``set_busy`` a GPU's busy part;
    ``unavailable`` makes every look fail with that reason until it is None again."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int], int] = {}
        self._samples: list[GpuUtilSample] = []
        self._clock_us = 0
        self._busy: dict[int, float] = {}
        self.unavailable: str | None = None

    def set_busy(self, gpu_index: int, part: float) -> None:
        self._busy[gpu_index] = part

    def hold(self, gpu_index: int, pid: int, mem: int) -> None:
        self._held[(gpu_index, pid)] = mem

    def release(self, pid: int) -> None:
        self._held = {k: v for k, v in self._held.items() if k[1] != pid}

    def sample(self, gpu_index: int, pid: int, sm_percent: int) -> None:
        self._clock_us += 1
        self._samples.append(
            GpuUtilSample(gpu_index=gpu_index, pid=pid, sm_percent=sm_percent, at_us=self._clock_us)
        )

    def processes(self) -> list[GpuProcess]:
        if self.unavailable is not None:
            raise GpuWatchUnavailable(self.unavailable)
        return [GpuProcess(gpu_index=g, pid=p, mem=m) for (g, p), m in sorted(self._held.items())]

    def busy(self) -> dict[int, float]:
        if self.unavailable is not None:
            raise GpuWatchUnavailable(self.unavailable)
        return dict(self._busy)

    def utilisation(self) -> list[GpuUtilSample]:
        if self.unavailable is not None:
            raise GpuWatchUnavailable(self.unavailable)
        out, self._samples = self._samples, []
        return out


class FakeContainers:
    """ProcessContainers over a table a test fills: ``of[pid]`` is its containers' ids."""

    def __init__(self) -> None:
        self.of: dict[int, tuple[str, ...]] = {}

    def containers_of(self, pid: int) -> tuple[str, ...]:
        return self.of.get(pid, ())
