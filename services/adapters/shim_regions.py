"""SliceRegions over the gpu_shim reader: one region per session on the host, two files.

File modes, no wider than the container needs (the engine, as root, resolves the bind
mounts whatever the directory allows):

    <root>/                      0700  the agent's only
    <root>/<session>.region      0660  the counters: every process of the container
                                       writes them (one budget shared by compare-and-swap,
                                       its slot, the ring), whatever user it runs as, so
                                       they belong to ``group``, which the container's
                                       processes get as a supplementary group
    <root>/<session>.region.slice 0440 the slice (limits, shares): read only, also
                                       mounted read-only in the container
    <root>/<session>.region.pace 0640  the agent's scale of each device's share
                                       (``gpu_shim.pace``): written by the agent alone,
                                       mounted read-only in the container

What a process writes in the counters misstates only its own session's usage; the agent's
NVML watch holds the session to its slice whatever the counters say.
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from gpu_shim.pace import PaceFile, pace_path
from gpu_shim.usage import (
    HappeningKind,
    RegionError,
    RegionInvalid,
    create_region,
    open_region,
)
from services.domain.container_spec import SLICE_SUFFIX
from services.ports import DeviceUsageSample, OomRefusal

if TYPE_CHECKING:
    from gpu_shim._reader import Region

__all__ = ["ShimRegions", "shim_lib_dir"]

log = structlog.get_logger()


def shim_lib_dir() -> str | None:
    """The directory of the built shim (``make -C gpu_shim``), if it is built."""
    built = Path(__file__).resolve().parents[2] / "gpu_shim" / "build" / "lib"
    return str(built) if (built / "libcuda.so.1").exists() else None


class ShimRegions:
    """Regions under ``root`` (a tmpfs such as /run/fgpu/regions is best). ``group``: the
    group whose processes may write the counters (default: the agent's effective group,
    gid 0 for an agent running as root; it must be one the agent may give its files).
    Every process of a session's container gets it as a supplementary group."""

    def __init__(self, root: str, *, group: int | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        self.group = os.getegid() if group is None else group
        self._open: dict[str, Region] = {}
        self._ring_seq: dict[str, int] = {}
        self._unread: set[str] = set()  # regions of another format, said once
        self._pace: dict[str, PaceFile] = {}

    def path(self, key: str) -> str:
        return str(self.root / f"{key}.region")

    def _region(self, key: str) -> "Region | None":
        region = self._open.get(key)
        if region is None:
            try:
                region = self._open[key] = open_region(self.path(key))
            except RegionInvalid as e:
                # A session started by an agent of an older version (its slice inside
                # the counters, writable from the container): not read, said once. The
                # NVML watch still holds the session to its slice, which the log gives.
                if key not in self._unread:
                    self._unread.add(key)
                    log.warning("shim_regions.unreadable", session=key, error=str(e))
                return None
            except (RegionError, OSError):
                return None
        return region

    def create(self, key: str, mem_limits: Sequence[int], sm_shares_ppm: Sequence[int]) -> str:
        path = self.path(key)
        region = create_region(path, tuple(mem_limits), tuple(sm_shares_ppm))
        self._open[key] = region
        old = self._pace.pop(key, None)
        if old is not None:
            old.close()
        self._pace[key] = PaceFile.create(Path(path))
        pace = str(pace_path(Path(path)))
        for file, mode in ((path, 0o660), (region.slice_path, 0o440), (pace, 0o640)):
            os.chown(file, -1, self.group)
            os.chmod(file, mode)
        return path

    def set_pace(self, key: str, index: int, scale: float) -> None:
        pace = self._pace.get(key)
        if pace is None:  # made before this agent started, or never
            try:
                pace = self._pace[key] = PaceFile(pace_path(Path(self.path(key))))
            except (OSError, ValueError):
                return
        pace.set_scale(index, scale)

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
                charged_ns=d.charged_ns,
                sm_share_ppm=d.sm_share_ppm,
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
        self._unread.discard(key)
        if region is not None:
            region.close()
        pace = self._pace.pop(key, None)
        if pace is not None:
            pace.close()
        Path(self.path(key)).unlink(missing_ok=True)
        Path(self.path(key) + SLICE_SUFFIX).unlink(missing_ok=True)
        pace_path(Path(self.path(key))).unlink(missing_ok=True)
