"""What an actor asks of the machine it runs on: its GPUs and the time."""

from datetime import datetime
from typing import Protocol

from events import GpuInfo

__all__ = ["Clock", "GpuProbe"]


class GpuProbe(Protocol):
    def gpus(self) -> list[GpuInfo]:
        """The GPUs of this host."""
        ...


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...
