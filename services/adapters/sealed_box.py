"""The cluster's secrets key: a Curve25519 key pair, values sealed to its public half
(libsodium's sealed box, through PyNaCl), opened by its private half.

The private key is a 0600 file beside the store (``fgpu up`` makes it once,
``load_or_create``); an agent run apart is given the same file (``fgpu agent
--secrets-key``). Anyone may seal (``seal``), with the public key the log holds.

Errors::

    SecretUnreadable   a sealed value this key cannot open (services.ports.secrets)
    KeyFileInvalid     the key file is not one this module wrote (permanent: say so)
"""

import base64
import os
from pathlib import Path

import nacl.exceptions
import nacl.public

from services.ports.secrets import SecretUnreadable

__all__ = ["KeyFileInvalid", "SealedBoxKey", "seal"]

_PREFIX = "fgpu-secrets-key-v1:"


class KeyFileInvalid(ValueError):
    """A secrets key file that holds no key (its path and why in the message)."""


def seal(public_key: bytes, value: str) -> bytes:
    """``value`` sealed to ``public_key``: only its private half opens it."""
    try:
        box = nacl.public.SealedBox(nacl.public.PublicKey(public_key))
    except (nacl.exceptions.CryptoError, TypeError, ValueError) as e:
        raise ValueError(f"not a secrets key: {e}") from e
    return box.encrypt(value.encode())


class SealedBoxKey:
    """A ``SecretOpener``: the private key, held in memory only."""

    def __init__(self, private: nacl.public.PrivateKey) -> None:
        self._box = nacl.public.SealedBox(private)
        self._public = bytes(private.public_key)

    def __repr__(self) -> str:  # never the key, whatever prints it
        return f"SealedBoxKey(public={base64.b64encode(self._public).decode()})"

    @property
    def public_key(self) -> bytes:
        return self._public

    def open(self, sealed: bytes) -> str:
        try:
            return self._box.decrypt(sealed).decode()
        except (nacl.exceptions.CryptoError, UnicodeDecodeError) as e:
            raise SecretUnreadable("a sealed value this key cannot open") from e

    @classmethod
    def generate(cls) -> "SealedBoxKey":
        return cls(nacl.public.PrivateKey.generate())

    @classmethod
    def load(cls, path: Path) -> "SealedBoxKey":
        """The key in ``path``. Raises KeyFileInvalid, OSError."""
        text = path.read_text().strip()
        if not text.startswith(_PREFIX):
            raise KeyFileInvalid(f"{path}: not an fgpu secrets key")
        try:
            raw = base64.b64decode(text.removeprefix(_PREFIX), validate=True)
            return cls(nacl.public.PrivateKey(raw))
        except (ValueError, TypeError, nacl.exceptions.CryptoError) as e:
            raise KeyFileInvalid(f"{path}: not an fgpu secrets key ({e})") from e

    @classmethod
    def load_or_create(cls, path: Path) -> "SealedBoxKey":
        """The key in ``path``, made there first (mode 0600, never replaced) if there is
        none. Raises KeyFileInvalid, OSError."""
        if not path.exists():
            private = nacl.public.PrivateKey.generate()
            text = _PREFIX + base64.b64encode(bytes(private)).decode() + "\n"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return cls.load(path)  # another made it meanwhile: theirs holds
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        return cls.load(path)
