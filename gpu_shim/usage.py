"""Typed values read from a container's shared usage region.

Pure Python: importing this module never needs the compiled reader.  The
reader (``gpu_shim._reader.Region``, opened through :func:`open_region`)
returns these values; the agent turns them into events.

Errors::

    RegionError                 anything wrong with a region
    ├── RegionNotFound          no file yet: the container has not started; retry later
    ├── RegionInvalid           not a region of this version: permanent
    └── RegionClosed            used after close(): a programming error
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_shim._reader import Region

__all__ = [
    "DeviceUsage",
    "Happening",
    "HappeningKind",
    "ProcessSlot",
    "RegionClosed",
    "RegionError",
    "RegionInvalid",
    "RegionNotFound",
    "create_region",
    "open_region",
]


class RegionError(Exception):
    """A usage region could not be used."""


class RegionNotFound(RegionError):
    """The region file does not exist (yet)."""


class RegionInvalid(RegionError):
    """The file is not a usage region of this version."""


class RegionClosed(RegionError):
    """The region was used after close()."""


class HappeningKind(enum.Enum):
    """What a ring record reports; values are the strings events should carry."""

    OOM_REFUSED = "oom_refused"
    PROCESS_STARTED = "process_started"
    PROCESS_EXITED = "process_exited"
    PROCESS_RECLAIMED = "process_reclaimed"
    UNHOOKED_ENTRY = "unhooked_entry"
    SLOTS_FULL = "slots_full"
    UNKNOWN = "unknown"

    @classmethod
    def from_code(cls, code: int) -> HappeningKind:
        """The kind of a C enum fgpu_happening_kind value (UNKNOWN for newer codes)."""
        return _KIND_BY_CODE.get(code, cls.UNKNOWN)


_KIND_BY_CODE = {
    1: HappeningKind.OOM_REFUSED,
    2: HappeningKind.PROCESS_STARTED,
    3: HappeningKind.PROCESS_EXITED,
    4: HappeningKind.PROCESS_RECLAIMED,
    5: HappeningKind.UNHOOKED_ENTRY,
    6: HappeningKind.SLOTS_FULL,
}


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One device of a container's slice, as the shims of its processes see it.

    ``launches`` is batched per thread (up to 63 launches of a running thread
    may not be counted yet).  ``charged_ns`` is the GPU time charged against the
    SM share (estimated; only counted while a share is set).
    """

    index: int
    limit: int
    in_use: int
    peak: int
    launches: int
    throttled_ns: int
    refusals: int
    charged_ns: int
    sm_share_ppm: int

    @property
    def limited(self) -> bool:
        """Whether a memory limit is set."""
        return self.limit != 0


@dataclass(frozen=True, slots=True)
class Happening:
    """One record of the region's ring.

    ``value``/``value2`` by kind: OOM_REFUSED (bytes asked, bytes in use then);
    PROCESS_STARTED (start time in clock ticks since boot, 0); PROCESS_EXITED
    and PROCESS_RECLAIMED (bytes given back, start time); UNHOOKED_ENTRY
    (FNV-1a hash of the symbol name, 0).  ``pid`` is in the container's pid
    namespace; ``time_ns`` is CLOCK_REALTIME.
    """

    seq: int
    kind: HappeningKind
    device: int | None
    pid: int
    slot: int | None
    value: int
    value2: int
    time_ns: int


@dataclass(frozen=True, slots=True)
class ProcessSlot:
    """A process slot in use; ``alive`` is False for a process awaiting reclaim."""

    slot: int
    pid: int
    start_time: int
    alive: bool
    bytes: tuple[int, ...]


def open_region(path: str | os.PathLike[str]) -> Region:
    """Open an existing region.  Raises RegionNotFound, RegionInvalid, OSError."""
    from gpu_shim._reader import Region

    return Region(path)


def create_region(
    path: str | os.PathLike[str],
    mem_limits: tuple[int, ...] = (),
    sm_shares_ppm: tuple[int, ...] = (),
) -> Region:
    """Create (or open) a region and set its slice, device by device."""
    from gpu_shim._reader import Region

    return Region.create(path, mem_limits, sm_shares_ppm)
