"""What opens a secret's sealed value: the agents' side of the cluster's secrets key.

Only an agent holds one (``services.adapters.sealed_box``), to put a session's secrets in
its container's environment at the start; nothing else ever sees a value in clear.
"""

from typing import Protocol

__all__ = ["SecretOpener", "SecretUnreadable"]


class SecretUnreadable(Exception):
    """A sealed value this key cannot open (sealed to another key, or damaged): permanent
    for that value; the message names no value."""


class SecretOpener(Protocol):
    @property
    def public_key(self) -> bytes:
        """The public half of the key: what values must be sealed to."""
        ...

    def open(self, sealed: bytes) -> str:
        """The value sealed in ``sealed``. Raises SecretUnreadable."""
        ...
