"""The fold's handlers of serving's events: the endpoints' own fold
(``services.domain.serving.state``) kept in ``ClusterState.serving``."""

from collections.abc import Callable
from typing import Any

from events import Event, ServeRefused
from services.domain.fold.cluster import ClusterState
from services.domain.serving.state import DECISIONS, SERVING_EVENTS, evolve

__all__ = ["HANDLERS"]


def _serving(s: ClusterState, seq: int, e: Any) -> None:
    # A request's first decision answers it, beside the registrar's answers (one table
    # of answers to people's requests: ``admin_answers``).
    cause = e.causation_id
    if cause is not None and isinstance(e, DECISIONS):
        request = s.serving.requests.get(cause)
        if request is not None and cause not in s.admin_answered:
            refused = (e.code, e.reason) if isinstance(e, ServeRefused) else None
            s.admin_answered[cause] = (seq, request, refused)
    evolve(s.serving, e)


HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = dict.fromkeys(
    SERVING_EVENTS, _serving
)
