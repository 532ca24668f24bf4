"""What a session's processes are told to be clients of NVIDIA MPS on their GPU.

An agent runs one MPS control daemon per GPU it has MPS on, each with its own pipe
directory (``services.adapters.mps_daemon``): a daemon's clients see its devices numbered
by the daemon, so with one daemon per GPU a container's device 0 is the daemon's device 0,
and a fatal fault in one GPU's clients keeps new clients off that GPU only. A process can
be the client of one daemon, so only a session on one GPU, an MPS one, is an MPS client;
any other runs as today (time-sliced, beside the MPS server on an MPS GPU).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from services.domain.gpu_slice import SHARE_FULL_PPM, DeviceSlice

__all__ = ["MPS_PIPE_IN_CONTAINER", "MpsClient", "mps_client", "shim_slice"]

MPS_PIPE_IN_CONTAINER = "/run/fgpu/mps"
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MpsClient:
    pipe_dir: str  # the host's pipe directory of the GPU's control daemon
    thread_percentage: int  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: 1..100
    pinned_mem_mib: int  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT of device 0

    def env(self) -> dict[str, str]:
        """The client's environment (NVIDIA's variables; the device is the container's
        only one, 0)."""
        return {
            "CUDA_MPS_PIPE_DIRECTORY": MPS_PIPE_IN_CONTAINER,
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(self.thread_percentage),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={self.pinned_mem_mib}M",
        }


def mps_client(parts: Sequence[DeviceSlice], pipe_dirs: Mapping[int, str]) -> MpsClient | None:
    """The MPS client a session holding ``parts`` is, given the pipe directory of each
    MPS GPU by host index; None unless it holds exactly one GPU and that one has MPS.
    Both limits are rounded down, as the slice is (never more than its share), the
    thread percentage to at least 1 (MPS takes no 0)."""
    if len(parts) != 1 or parts[0].gpu.index not in pipe_dirs:
        return None
    (p,) = parts
    return MpsClient(
        pipe_dir=pipe_dirs[p.gpu.index],
        thread_percentage=max(1, p.sm_share_ppm * 100 // SHARE_FULL_PPM),
        pinned_mem_mib=p.mem_limit // _MIB,
    )


def shim_slice(parts: Sequence[DeviceSlice], client: MpsClient | None) -> list[DeviceSlice]:
    """The slice the shim enforces: for an MPS client its memory only, its SM share the
    whole device's (MPS holds the client to its share of the SMs; pacing its launches to
    the share as well would give it about the share's square)."""
    if client is None:
        return list(parts)
    return [replace(p, sm_share_ppm=SHARE_FULL_PPM) for p in parts]
