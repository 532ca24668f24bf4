"""What a placement means on the devices: memory bytes and SM share per device.

The administrator's ratio (``fgpu_per_gpu`` quanta per physical GPU) decides it: with 200
(1 GPU = 2 fGPU), 1 fGPU is half of a device's memory and half of its SMs' time.
"""

from decimal import Decimal

from events import DevicePlacement, GpuInfo

__all__ = ["DeviceSlice", "slices"]


class DeviceSlice:
    __slots__ = ("gpu", "mem_limit", "sm_share")

    def __init__(self, gpu: GpuInfo, mem_limit: int, sm_share: Decimal) -> None:
        self.gpu = gpu
        self.mem_limit = mem_limit
        self.sm_share = sm_share


def slices(
    devices: tuple[DevicePlacement, ...], gpus: dict[int, GpuInfo], fgpu_per_gpu: int
) -> list[DeviceSlice]:
    """Per placed device: its memory limit in bytes (rounded down) and its SM share."""
    out = []
    for d in devices:
        gpu = gpus[d.gpu_index]
        out.append(
            DeviceSlice(
                gpu=gpu,
                mem_limit=gpu.mem * d.fgpu // fgpu_per_gpu,
                sm_share=Decimal(d.fgpu) / Decimal(fgpu_per_gpu),
            )
        )
    return out
