"""What a placement means on the devices: memory bytes and SM share per device.

The administrator's ratio (``fgpu_per_gpu`` quanta per physical GPU) decides it: with 200
(1 GPU = 2 fGPU), 1 fGPU is half of a device's memory and half of its SMs' time. Both are
rounded down, so a slice never exceeds its share.
"""

from dataclasses import dataclass
from decimal import Decimal

from events import DevicePlacement, GpuInfo

__all__ = ["SHARE_FULL_PPM", "DeviceSlice", "format_share", "slices"]

SHARE_FULL_PPM = 1_000_000  # the shim's unit: parts per million of the SMs' time


@dataclass(frozen=True, slots=True)
class DeviceSlice:
    gpu: GpuInfo
    mem_limit: int  # bytes
    sm_share_ppm: int


def slices(
    devices: tuple[DevicePlacement, ...], gpus: dict[int, GpuInfo], fgpu_per_gpu: int
) -> list[DeviceSlice]:
    """Per placed device, in the container's device order: memory limit and SM share."""
    out = []
    for d in devices:
        gpu = gpus[d.gpu_index]
        out.append(
            DeviceSlice(
                gpu=gpu,
                mem_limit=gpu.mem * d.fgpu // fgpu_per_gpu,
                sm_share_ppm=SHARE_FULL_PPM * d.fgpu // fgpu_per_gpu,
            )
        )
    return out


def format_share(ppm: int) -> str:
    """ "0.5" for 500000 ppm, exactly (at most 6 decimals)."""
    return f"{(Decimal(ppm) / SHARE_FULL_PPM).normalize():f}"
