"""SliceRegions over the gpu_shim reader: one region file per session on the host."""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_shim.usage import HappeningKind, RegionError, create_region, open_region
from services.ports import DeviceUsageSample, OomRefusal

if TYPE_CHECKING:
    from gpu_shim._reader import Region

__all__ = ["ShimRegions", "shim_lib_dir"]


def shim_lib_dir() -> str | None:
    """The directory of the built shim (``make -C gpu_shim``), if it is built."""
    built = Path(__file__).resolve().parents[2] / "gpu_shim" / "build" / "lib"
    return str(built) if (built / "libcuda.so.1").exists() else None


class ShimRegions:
    """Regions under ``root`` (a tmpfs such as /run/fgpu/regions is best)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._open: dict[str, Region] = {}
        self._ring_seq: dict[str, int] = {}

    def path(self, key: str) -> str:
        return str(self.root / f"{key}.region")

    def _region(self, key: str) -> "Region | None":
        region = self._open.get(key)
        if region is None:
            try:
                region = self._open[key] = open_region(self.path(key))
            except (RegionError, OSError):
                return None
        return region

    def create(self, key: str, mem_limits: Sequence[int], sm_shares_ppm: Sequence[int]) -> str:
        path = self.path(key)
        self._open[key] = create_region(path, tuple(mem_limits), tuple(sm_shares_ppm))
        os.chmod(path, 0o666)  # the container's processes may run as any user
        return path

    def sample(self, key: str) -> list[DeviceUsageSample]:
        region = self._region(key)
        if region is None:
            return []
        return [
            DeviceUsageSample(
                index=d.index,
                mem_used=d.in_use,
                mem_peak=d.peak,
                mem_limit=d.limit,
                launches=d.launches,
                throttled_ns=d.throttled_ns,
                refusals=d.refusals,
            )
            for d in region.devices()
            if d.limited or d.sm_share_ppm or d.in_use
        ]

    def drain_ooms(self, key: str) -> list[OomRefusal]:
        region = self._region(key)
        if region is None:
            return []
        out = []
        for h in region.drain_ring(self._ring_seq.get(key, 0)):
            self._ring_seq[key] = max(self._ring_seq.get(key, 0), h.seq)
            if h.kind is HappeningKind.OOM_REFUSED:
                out.append(
                    OomRefusal(index=h.device or 0, pid=h.pid, requested=h.value, mem_used=h.value2)
                )
        return out

    def reclaim(self, key: str) -> int:
        region = self._region(key)
        return 0 if region is None else region.reclaim_dead()

    def remove(self, key: str) -> None:
        region = self._open.pop(key, None)
        self._ring_seq.pop(key, None)
        if region is not None:
            region.close()
        Path(self.path(key)).unlink(missing_ok=True)
