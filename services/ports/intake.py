"""People's requests on their way to the log: the intake's queue and the sender in front.

With tenancy, people do not append to the log: they hand requests to the intake
(``RequestSender``), which reads them (``IntakeQueue``) and writes those it lets through
on their subjects of the log (``services.actors.intake``).
"""

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from events import AnyEvent
from services.ports.errors import LogError

__all__ = ["Handed", "IntakeQueue", "RequestSender", "RequestsRefused"]


class RequestsRefused(LogError):
    """The intake took none of the requests: it holds as many of this key's as it keeps
    waiting (ask again once the earlier ones are through: a flood only ever blocks
    itself), or its stream said it cannot store them (the reason says why)."""


@dataclass(frozen=True)
class Handed:
    """One message handed to the intake: by ``key`` (the one its subject names, which the
    server confines each person to), its bytes, and how to let it go for good."""

    key: str
    data: bytes
    done: Callable[[], Awaitable[None]]


class IntakeQueue(Protocol):
    def handed(self) -> AsyncGenerator[list[Handed], None]:
        """Messages as they come, oldest first, a batch at a time (an empty batch when
        none came for a while, so that the reader may do its timed work). One not
        ``done`` is handed again later (after a while, or to the next reader).
        Raises LogError."""
        ...


class RequestSender(Protocol):
    async def send(self, events: Sequence[AnyEvent]) -> None:
        """Hand ``events`` (requests of one person) to the intake, in one message: all of
        them are written, in order, or none. The message is known by its first event's id:
        handed again within the intake stream's dedupe window (2 minutes), it is taken
        once. Raises RequestsRefused (nothing taken), OutcomeUnknown (no answer: hand the
        same events again), LogError (nothing sent: the connection is away)."""
        ...
