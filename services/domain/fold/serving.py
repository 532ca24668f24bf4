"""The fold's handlers of serving's events: the endpoints' own fold
(``services.domain.serving.state``) kept in ``ClusterState.serving``."""

from collections.abc import Callable
from typing import Any

from events import (
    EndpointCreated,
    EndpointRemoved,
    Event,
    ReplicaChanged,
    ReplicaHealthReported,
    ReplicaRotation,
    ReplicasSet,
    RevisionAdded,
    ServeRefused,
    ServeRequested,
    TokenCreated,
    TokenRevoked,
)
from services.domain.fold.cluster import ClusterState
from services.domain.serving.state import evolve

__all__ = ["HANDLERS"]


def _serving(s: ClusterState, seq: int, e: Any) -> None:
    evolve(s.serving, e)


HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = dict.fromkeys(
    (
        ServeRequested,
        ServeRefused,
        EndpointCreated,
        RevisionAdded,
        ReplicasSet,
        EndpointRemoved,
        TokenCreated,
        TokenRevoked,
        ReplicaChanged,
        ReplicaRotation,
        ReplicaHealthReported,
    ),
    _serving,
)
