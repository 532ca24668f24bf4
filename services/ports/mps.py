"""The MPS control daemons an agent runs for the GPUs it has MPS on."""

from typing import Protocol

__all__ = ["MpsControl", "MpsUnavailable"]


class MpsUnavailable(Exception):
    """A GPU's MPS control daemon could not be started (no such program, it failed, its
    directory cannot hold its sockets): permanent for this start, whose operator asked
    for MPS. The message says which GPU and why."""


class MpsControl(Protocol):
    """One MPS control daemon per GPU, each on its own pipe directory."""

    @property
    def pipe_dirs(self) -> dict[str, str]:
        """Each GPU's (by UUID) pipe directory on the host, which its clients mount."""
        ...

    def start(self) -> None:
        """Every GPU's daemon running (one found running on its directory is kept).
        Blocking. Raises MpsUnavailable, having stopped those it started."""
        ...

    def stop(self) -> None:
        """Every daemon told to quit. Blocking; never raises (a daemon that does not quit
        in time is logged and left running)."""
        ...
