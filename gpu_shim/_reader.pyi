"""Type stub of the Cython extension gpu_shim._reader."""

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Literal

from gpu_shim.usage import DeviceUsage, Happening, ProcessSlot

MAX_DEVICES: int
MAX_SLOTS: int
RING_SIZE: int
SHARE_FULL: int
SLICE_SUFFIX: str

class Region:
    """One container's shared usage region: its slice (read once) and its counters."""

    @property
    def path(self) -> str: ...
    @property
    def slice_path(self) -> str: ...
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        _create: bool = False,
        mem_limits: Sequence[int] = (),
        sm_shares_ppm: Sequence[int] = (),
    ) -> None: ...
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        mem_limits: Sequence[int] = (),
        sm_shares_ppm: Sequence[int] = (),
    ) -> Region: ...
    def close(self) -> None: ...
    def __enter__(self) -> Region: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...
    def device(self, index: int) -> DeviceUsage: ...
    def devices(self) -> list[DeviceUsage]: ...
    def processes(self) -> list[ProcessSlot]: ...
    def drain_ring(self, after: int = 0) -> list[Happening]: ...
    def reclaim_dead(self) -> int: ...
