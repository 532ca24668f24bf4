"""The shared regions through which the shim in each container enforces and reports."""

from collections.abc import Sequence
from typing import Protocol

import msgspec

__all__ = ["DeviceUsageSample", "OomRefusal", "SliceRegions"]


class DeviceUsageSample(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one device of a container's slice (index in the container's order).

    ``charged_ns``: GPU time charged against ``sm_share_ppm`` (the slice's share of the
    SMs, parts per million), counted only while the share is less than the whole device.
    """

    index: int
    mem_used: int
    mem_peak: int
    mem_limit: int
    launches: int
    throttled_ns: int
    refusals: int
    charged_ns: int = 0
    sm_share_ppm: int = 0


class OomRefusal(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    pid: int
    requested: int
    mem_used: int


class SliceRegions(Protocol):
    """The shared regions through which the shim in each container enforces and reports.

    One region per session on the host: its counters, at the path ``create`` returns, which
    the container maps read-write, and its slice beside them (``SLICE_SUFFIX`` of
    ``services.domain.container_spec``), which the container may only read. Reads are
    lock-free memory reads: cheap enough to call from the event loop.
    """

    @property
    def group(self) -> int:
        """The group (gid) whose processes may write the counters: the container's
        processes get it as a supplementary group."""
        ...

    def create(self, key: str, mem_limits: Sequence[int], sm_shares_ppm: Sequence[int]) -> str:
        """Create the region of ``key`` with its slice per device (a slice made earlier
        is replaced: call it before the container starts); its counters' host path."""
        ...

    def set_pace(self, key: str, index: int, scale: float) -> None:
        """Scale the SM share of device ``index`` (the container's order) of ``key``'s
        slice by ``scale`` (clamped to [0.25, 1]), from the container's next launch
        (``gpu_shim.pace``); nothing when the region has no pace file."""
        ...

    def sample(self, key: str) -> list[DeviceUsageSample]:
        """The counters of each device, with its slice; [] if the region is gone or of
        a format this reader does not read."""
        ...

    def drain_ooms(self, key: str) -> list[OomRefusal]:
        """Out-of-memory refusals recorded since the last call."""
        ...

    def reclaim(self, key: str) -> int:
        """Give back the bytes of the container's processes that died; how many."""
        ...

    def remove(self, key: str) -> None:
        """Delete the region, both files (the session ended); no error if gone."""
        ...
