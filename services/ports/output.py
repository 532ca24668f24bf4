"""Where an agent keeps what a session's container printed, once the container is gone."""

from dataclasses import dataclass
from typing import Protocol

__all__ = ["KeptOutput", "OutputStore"]


@dataclass(frozen=True)
class KeptOutput:
    """A session's last output lines, and whose it was (to check who may read it once
    the fold has let go of the session)."""

    owner: str
    domain: str
    text: str


class OutputStore(Protocol):
    """The output of ended sessions, one record each, kept by the agent that ran them.

    Both methods raise OSError for a failure of the store underneath."""

    async def keep(self, session_id: str, output: KeptOutput) -> None:
        """Keep ``output`` as ``session_id``'s, whole or not at all."""
        ...

    async def kept(self, session_id: str) -> KeptOutput | None:
        """What was kept of ``session_id``; None if nothing was (or it cannot be read)."""
        ...
