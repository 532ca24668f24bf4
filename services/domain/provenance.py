"""Who makes a new event, when and why: stamping events with a fresh id."""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from events import AnyEvent

__all__ = ["Provenance", "new_id", "stamp"]

E = TypeVar("E", bound=AnyEvent)


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class Provenance:
    """Who makes an event, when, and because of which earlier event."""

    actor: str
    at: datetime
    causation_id: str | None = None
    correlation_id: str | None = None


def stamp(cls: type[E], prov: Provenance, **fields: Any) -> E:
    """A new event of type ``cls`` with a fresh id and the given provenance."""
    return cls(
        id=new_id(),
        at=prov.at,
        actor=prov.actor,
        causation_id=prov.causation_id,
        correlation_id=prov.correlation_id,
        **fields,
    )
