"""The envelope every event carries."""

from datetime import datetime

import msgspec

__all__ = ["Event"]


class Event(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    forbid_unknown_fields=True,
    gc=False,
):
    """Common fields of every event.

    ``id`` is unique per event and doubles as the JetStream ``Nats-Msg-Id`` for dedupe.
    ``actor`` is who caused the event: an access key for a user's request, or an actor's
    name (``quota``, ``scheduler``, ``agent:<id>``). ``causation_id`` is the id of the
    event that directly led to this one; ``correlation_id`` ties together everything that
    followed from one user action (for a session: its request's id).

    ``gc=False`` (inherited by every event, and set on the Structs they hold): an event is
    frozen and holds only immutable values, so it can be in no reference cycle and the
    garbage collector need not track it; that halves the cost of decoding the log.
    """

    id: str
    at: datetime
    actor: str
    causation_id: str | None = None
    correlation_id: str | None = None
