"""Keypairs: an access key (public, a subject token) and a secret shown once.

Only a salted hash of the secret is ever kept (``scrypt$n$r$p$salt$hash``, base64): on the
log, in the tenancy, anywhere. Checking a secret costs the scrypt work by design.
"""

import base64
import hashlib
import hmac
import secrets

__all__ = ["hash_secret", "new_access_key", "new_secret", "secret_matches"]

_N, _R, _P = 1 << 14, 8, 1
_DKLEN = 32


def new_access_key(prefix: str = "AK") -> str:
    """A fresh access key: a subject token, unguessable, 22 characters."""
    return prefix + secrets.token_hex(10).upper()


def new_secret() -> str:
    """A fresh secret of 256 random bits, URL-safe text."""
    return secrets.token_urlsafe(32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def hash_secret(secret: str, *, salt: bytes | None = None) -> str:
    """The salted hash of ``secret``, as kept: ``scrypt$n$r$p$salt$hash``."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=_DKLEN)
    return f"scrypt${_N}${_R}${_P}${_b64(salt)}${_b64(digest)}"


def secret_matches(secret: str, kept: str) -> bool:
    """Whether ``secret`` is the one ``kept`` was made from (False for anything that is no
    hash of ours). Compares in constant time."""
    try:
        kind, n, r, p, salt, digest = kept.split("$")
        if kind != "scrypt":
            return False
        want = base64.b64decode(digest, validate=True)
        got = hashlib.scrypt(
            secret.encode(),
            salt=base64.b64decode(salt, validate=True),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(want),
            maxmem=1 << 26,
        )
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(got, want)
