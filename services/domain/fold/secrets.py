"""The fold of secrets: each owner's latest sealed value of each, and the cluster's key
(``services.domain.secrets``). ``HANDLERS`` as the other families'."""

from collections.abc import Callable
from typing import Any

from events import Event, SecretRemoved, SecretSet, SecretsKeySet
from services.domain.fold.cluster import ClusterState

__all__ = ["HANDLERS"]


def _secret(s: ClusterState, seq: int, e: SecretSet | SecretRemoved | SecretsKeySet) -> None:
    # With tenancy, only a live person's key holds secrets: one set by a key revoked (or
    # of no user) before the servers cut it off counts for nothing.
    if isinstance(e, SecretSet) and s.tenancy.on and s.tenancy.user_of(e.owner) is None:
        return
    s.secrets.evolve(e)


HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = dict.fromkeys(
    (SecretSet, SecretRemoved, SecretsKeySet), _secret
)
