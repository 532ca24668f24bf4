"""GPU discovery: NVML on hosts with NVIDIA GPUs, or GPUs declared in the agent's config;
and the driver's own figures of the processes using them (``NvmlProcessWatch``)."""

import ctypes
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec
import structlog

from events import GpuInfo
from services.ports.gpu_watch import GpuProcess, GpuUtilSample, GpuWatchUnavailable

__all__ = ["MockGpus", "NvmlProbe", "NvmlProcessWatch", "cuda_sm_counts"]

log = structlog.get_logger()


class NvmlProbe:
    """The host's NVIDIA GPUs through pynvml; none when NVML is missing (no driver).

    Listed in PCI bus order, each indexed by its place in it: the order every other reader
    of the host's GPUs uses (``NvmlProcessWatch``; CUDA told ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    in containers, ``gpu_slice.container_order``). A GPU whose multiprocessor count NVML
    does not give (its attributes are only for MIG on some cards: a whole H100 gives none)
    gets the CUDA driver's (``cuda_sm_counts``), else 0."""

    def __init__(self, libcuda: str = "libcuda.so.1") -> None:
        self._libcuda = libcuda

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
            found = [_describe(pynvml, h) for h in _handles_in_pci_order(pynvml)]
        finally:
            pynvml.nvmlShutdown()
        unknown = [bus for bus, info in found if info.sm_count == 0]
        counts = cuda_sm_counts(unknown, self._libcuda) if unknown else {}
        return [
            msgspec.structs.replace(info, index=i, sm_count=counts.get(bus, info.sm_count))
            for i, (bus, info) in enumerate(found)
        ]


def _handles_in_pci_order(pynvml: Any) -> list[Any]:
    """NVML's device handles by PCI bus id: NVML does not promise its index order is."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    return sorted(handles, key=lambda h: _bus_id(pynvml, h).lower())


def _bus_id(pynvml: Any, handle: Any) -> str:
    bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
    return bus if isinstance(bus, str) else bus.decode()


def _describe(pynvml: Any, h: Any) -> tuple[str, GpuInfo]:
    """One device's PCI bus id and what NVML says of it (index to be set by the caller;
    sm_count 0 where NVML gives none)."""
    name = pynvml.nvmlDeviceGetName(h)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    try:
        sm = int(pynvml.nvmlDeviceGetAttributes(h).multiprocessorCount)
    except pynvml.NVMLError:
        sm = 0
    info = GpuInfo(
        index=0,
        uuid=uuid if isinstance(uuid, str) else uuid.decode(),
        model=name if isinstance(name, str) else name.decode(),
        mem=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
        sm_count=sm,
    )
    return _bus_id(pynvml, h), info


_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16  # cuda.h's CUdevice_attribute


def cuda_sm_counts(bus_ids: Sequence[str], libcuda: str = "libcuda.so.1") -> dict[str, int]:
    """The multiprocessor count of each GPU named by its PCI bus id (NVML's form,
    ``00000000:17:00.0``), from the CUDA driver ``libcuda`` (initialised in this process,
    no context made). A GPU the driver cannot tell of is left out; no driver to load,
    or one that does not initialise, gives an empty dict and a log line. Never raises."""
    try:
        cuda = ctypes.CDLL(libcuda)
        if (rc := cuda.cuInit(0)) != 0:
            log.warning("gpu_probe.no_cuda", library=libcuda, error=f"cuInit returned {rc}")
            return {}
    except (OSError, AttributeError) as e:
        log.warning("gpu_probe.no_cuda", library=libcuda, error=str(e))
        return {}
    out = {}
    for bus in bus_ids:
        dev, count = ctypes.c_int(), ctypes.c_int()
        if cuda.cuDeviceGetByPCIBusId(ctypes.byref(dev), bus.encode()) != 0:
            continue
        attr = _CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        if cuda.cuDeviceGetAttribute(ctypes.byref(count), attr, dev) == 0 and count.value > 0:
            out[bus] = count.value
    missing = sorted(set(bus_ids) - set(out))
    if missing:
        log.warning("gpu_probe.no_sm_count", gpus=missing)
    return out


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
                # Indexed as NvmlProbe indexes the agent's GPUs: in PCI order.
                self._handles = _handles_in_pci_order(pynvml)
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

    def busy(self) -> dict[int, float]:
        """Raises GpuWatchUnavailable."""
        import pynvml

        with _nvml_call("read the GPUs' utilisation"):
            return {
                i: pynvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
                for i, h in enumerate(self._devices())
            }

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


def main() -> None:
    """``python -m services.adapters.gpu_probe [LIBCUDA]``: the host's GPUs as NvmlProbe
    finds them (asking the CUDA driver LIBCUDA, default libcuda.so.1, what NVML does not
    tell), one JSON line (a list of GpuInfo) on stdout, for checks on a real GPU; what it logs
    goes to stderr."""
    import sys

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    probe = NvmlProbe(*sys.argv[1:2])
    print(msgspec.json.encode(probe.gpus()).decode())


if __name__ == "__main__":
    main()
