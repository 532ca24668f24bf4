"""The pace file of a container's region: the agent's per-device scale of its SM share.

Layout (``fgpu_pace`` in gpu_shim/src/fgpu_region.h): magic, version, then one
``uint32`` scale in parts per million per device. Only the agent writes it (the
container gets it read-only); the shim reads the scale on every paced launch, so a
change takes effect at the container's next launch. Each scale is one aligned 4-byte
store, which a reader never sees torn.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["MAX_DEVICES", "MIN_SCALE", "PaceFile", "pace_path"]

MAGIC = 0x45434150
VERSION = 1
FULL_PPM = 1_000_000
MIN_SCALE = 0.25  # FGPU_PACE_MIN_PPM: the shim never scales a share below a quarter
MAX_DEVICES = 16
SUFFIX = ".pace"
_HEADER = struct.Struct("<II")
_SCALE = struct.Struct("<I")
SIZE = _HEADER.size + MAX_DEVICES * _SCALE.size


def pace_path(region: Path) -> Path:
    """Where the pace file of the region at ``region`` lives."""
    return region.with_name(region.name + SUFFIX)


class PaceFile:
    """The agent's handle on one container's pace file, mapped read-write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("r+b") as f:
            self._m = mmap.mmap(f.fileno(), SIZE)
        if _HEADER.unpack_from(self._m) != (MAGIC, VERSION):
            self._m.close()
            raise ValueError(f"{path}: not a version {VERSION} pace file")

    @classmethod
    def create(cls, region: Path) -> Self:
        """A new pace file for the region at ``region``, every device unscaled. It
        replaces any earlier one whole (written aside, then renamed), so a shim never
        maps a half-written file; readable by all, writable by its owner only."""
        path = pace_path(region)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        body = _HEADER.pack(MAGIC, VERSION) + _SCALE.pack(FULL_PPM) * MAX_DEVICES
        tmp.write_bytes(body)
        tmp.chmod(0o644)
        tmp.replace(path)
        return cls(path)

    def scale(self, device: int) -> float:
        ppm: int = _SCALE.unpack_from(self._m, self._offset(device))[0]
        return ppm / FULL_PPM

    def set_scale(self, device: int, scale: float) -> None:
        """Scale the device's share by ``scale``, clamped to [MIN_SCALE, 1]."""
        ppm = round(min(1.0, max(MIN_SCALE, scale)) * FULL_PPM)
        _SCALE.pack_into(self._m, self._offset(device), ppm)

    def close(self) -> None:
        self._m.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @staticmethod
    def _offset(device: int) -> int:
        if not 0 <= device < MAX_DEVICES:
            raise ValueError(f"device {device} is not 0..{MAX_DEVICES - 1}")
        return _HEADER.size + device * _SCALE.size
