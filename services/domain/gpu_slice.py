"""What a placement means on the devices: memory bytes and SM share per device.

The administrator's ratio (``fgpu_per_gpu`` quanta per physical GPU) decides it: with 200
(1 GPU = 2 fGPU), 1 fGPU is half of a device's memory and half of its SMs' time. Both are
rounded down, so a slice never exceeds its share.
"""

from dataclasses import dataclass

from events import DevicePlacement, GpuInfo

__all__ = ["SHARE_FULL_PPM", "DeviceSlice", "container_order", "host_index", "slices"]

# The shim's unit: parts per million of the SMs' time, the whole device's share. The shim
# defines it in C (gpu_shim/src/fgpu_region.h, FGPU_SHARE_FULL); a test pins the two equal.
SHARE_FULL_PPM = 1_000_000


@dataclass(frozen=True, slots=True)
class DeviceSlice:
    gpu: GpuInfo
    mem_limit: int  # bytes
    sm_share_ppm: int


def container_order(devices: tuple[DevicePlacement, ...]) -> tuple[DevicePlacement, ...]:
    """A session's devices in the order its container numbers them: by the host's index,
    which is NVML's, which is PCI bus order; CUDA numbers them so too once told to
    (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, which the spec sets). Placement order (largest
    share first) would give one device another's limit inside the container."""
    return tuple(sorted(devices, key=lambda d: d.gpu_index))


def host_index(devices: tuple[DevicePlacement, ...], container_index: int) -> int:
    """The host's GPU index of the ``container_index``-th device the container sees."""
    ordered = container_order(devices)
    if 0 <= container_index < len(ordered):
        return ordered[container_index].gpu_index
    return container_index


def slices(
    devices: tuple[DevicePlacement, ...], gpus: dict[int, GpuInfo], fgpu_per_gpu: int
) -> list[DeviceSlice]:
    """Per placed device, in the container's device order (``container_order``): memory
    limit and SM share."""
    out = []
    for d in container_order(devices):
        gpu = gpus[d.gpu_index]
        out.append(
            DeviceSlice(
                gpu=gpu,
                mem_limit=gpu.mem * d.fgpu // fgpu_per_gpu,
                sm_share_ppm=SHARE_FULL_PPM * d.fgpu // fgpu_per_gpu,
            )
        )
    return out
