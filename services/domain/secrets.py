"""Secrets: what the fold keeps of each owner's, and the rules about their names and the
references sessions make to them. Pure.

A secret is an access key's named value, set sealed to the cluster's secrets key
(``events.secret``): the fold keeps the latest sealed value of each, with its version
(1, 2, ... since it was last removed) and when it was set, and the public key values are
sealed to. Nothing here can open a value; only the agents' side holds the private key
(``services.ports.secrets``).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from events import SecretRemoved, SecretSet, SecretsKeySet

__all__ = [
    "MAX_REFERENCES",
    "MAX_SEALED",
    "HeldSecret",
    "SecretBook",
    "missing_secret",
    "name_problem",
    "references_problem",
]

MAX_SEALED = 4096 + 48  # a value of 4096 bytes, sealed (a sealed box adds 48 bytes)
MAX_REFERENCES = 64
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def name_problem(name: str) -> str | None:
    """Why ``name`` may not name a secret, or None."""
    if _NAME.fullmatch(name) is None:
        return f"a secret's name is 1-63 letters, digits, '.', '-' or '_', got {name!r}"
    return None


def references_problem(
    refs: Sequence[tuple[str, str]], env: Sequence[tuple[str, str]]
) -> str | None:
    """Why a session's secret references ``refs`` (variable, secret name) may not stand
    beside its clear environment ``env``, or None."""
    if len(refs) > MAX_REFERENCES:
        return f"at most {MAX_REFERENCES} secret references"
    names = [k for k, _ in refs]
    if len(set(names)) != len(names) or any(_VAR.fullmatch(k) is None for k in names):
        return "secret variables' names: letters, digits and '_' (not first a digit), each once"
    both = sorted(set(names) & {k for k, _ in env})
    if both:
        return f"{both[0]} is given both in clear and as a secret"
    for _, secret in refs:
        problem = name_problem(secret)
        if problem is not None:
            return problem
    return None


@dataclass(frozen=True, slots=True)
class HeldSecret:
    """The latest value of one secret: sealed, its version, when it was set."""

    sealed: bytes
    version: int
    set_at: datetime


@dataclass(slots=True)
class SecretBook:
    """Every owner's secrets (owner -> name -> latest) and the cluster's public key."""

    owners: dict[str, dict[str, HeldSecret]] = field(default_factory=dict)
    public_key: bytes | None = None

    def evolve(self, e: SecretSet | SecretRemoved | SecretsKeySet) -> None:
        """Apply one event that stands on its own subject (the fold checked it). A set
        of a malformed name or an oversized value changes nothing."""
        match e:
            case SecretsKeySet():
                self.public_key = e.public_key
            case SecretSet() if name_problem(e.name) is None and len(e.sealed) <= MAX_SEALED:
                mine = self.owners.setdefault(e.owner, {})
                before = mine.get(e.name)
                version = 1 if before is None else before.version + 1
                mine[e.name] = HeldSecret(e.sealed, version, e.at)
            case SecretRemoved():
                mine = self.owners.get(e.owner, {})
                mine.pop(e.name, None)
                if not mine:
                    self.owners.pop(e.owner, None)

    def of(self, owner: str) -> dict[str, HeldSecret]:
        """``owner``'s secrets by name (empty if none)."""
        return self.owners.get(owner, {})


def missing_secret(book: SecretBook, owner: str, refs: Sequence[tuple[str, str]]) -> str | None:
    """Why ``owner`` may not refer to ``refs`` now (the first secret it lacks), or None."""
    mine = book.of(owner)
    for _, name in refs:
        if name not in mine:
            return f"no secret {name} of {owner}'s (fgpu secret set {name})"
    return None
