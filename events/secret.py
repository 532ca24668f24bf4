"""Secrets: a user's named values, kept off the log in clear.

A person sets one (``SecretSet``) or removes it (``SecretRemoved``) on its own request
subject ``fgpu.req.<key>.<event id>``, handed in through the intake as every request is:
the subject names the owner, so nobody sets or removes another's. ``sealed`` is the
value sealed to the cluster's secrets key (a libsodium sealed box: only the holder of the
private key, the agents' side, can open it); the clear value is never on the log.
A session refers to a secret by name (``SessionRequested.secret_env``); its agent opens
the latest one at the container's start. ``docs/pipelines.md`` ("Secrets") says why.

The key values are sealed to is on the log too (``SecretsKeySet``, its public half only, on
``fgpu.tenancy``, which only the cluster's own writers may write and which is kept when
the log's past is archived): ``fgpu up`` writes it once, from the key pair it keeps
beside its store.
"""

from events.base import Event

__all__ = ["SecretRemoved", "SecretSet", "SecretsKeySet"]


class SecretSet(Event, frozen=True, kw_only=True, tag="secret.set.v1"):
    """``owner`` sets its secret ``name`` to the value sealed in ``sealed`` (a new version
    of it, numbered by the fold: 1 for the first since it was last removed)."""

    owner: str
    name: str
    sealed: bytes


class SecretRemoved(Event, frozen=True, kw_only=True, tag="secret.removed.v1"):
    """``owner`` removes its secret ``name``: no session may refer to it any more."""

    owner: str
    name: str


class SecretsKeySet(Event, frozen=True, kw_only=True, tag="secret.key-set.v1"):
    """The cluster's secrets key: ``public_key`` (32 bytes, a Curve25519 public key), to
    which every ``SecretSet.sealed`` is sealed. The latest one counts."""

    public_key: bytes
