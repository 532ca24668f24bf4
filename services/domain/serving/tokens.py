"""An endpoint token as the CLI and the web UI make it: the value shown once, its id,
and the SHA-256 that alone goes on the log (``endpoint.token-created``)."""

import hashlib
import secrets

__all__ = ["new_token"]


def new_token() -> tuple[str, str, str]:
    """A fresh token: (value, token id, sha256 of the value in hex)."""
    value = "fgt_" + secrets.token_urlsafe(32)
    return value, f"t{secrets.token_hex(6)}", hashlib.sha256(value.encode()).hexdigest()
