"""The read API's tokens the CLI holds, so that each call need not sign in again.

Kept in ``$FGPU_HOME/api-tokens.json`` (mode 0600), by API address and access key; a
token within a minute of its expiry is not used. A token is only a shortcut: a refused
one is dropped and the keypair signs in again.
"""

import contextlib
import json
import time
from pathlib import Path

from services.cli.home import write_private

__all__ = ["TokenCache"]

_MARGIN_S = 60


class TokenCache:
    """Tokens by (API address, access key), in ``path`` (None: in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._memory: dict[str, dict[str, float | str]] = {}

    def _load(self) -> dict[str, dict[str, float | str]]:
        if self.path is None:
            return self._memory
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, api: str, access_key: str) -> str | None:
        entry = self._load().get(f"{api} {access_key}")
        if not isinstance(entry, dict):
            return None
        token, expires = entry.get("token"), entry.get("expires")
        if not isinstance(token, str) or not isinstance(expires, int | float):
            return None
        return token if expires - _MARGIN_S > time.time() else None

    def put(self, api: str, access_key: str, token: str | None, expires: float = 0) -> None:
        """Keep ``token`` (None: forget the one kept). Never fails a command: a cache that
        cannot be written is only slower."""
        data = {k: v for k, v in self._load().items() if _live(v)}
        key = f"{api} {access_key}"
        if token is None:
            data.pop(key, None)
        else:
            data[key] = {"token": token, "expires": expires}
        if self.path is None:
            self._memory = data
            return
        with contextlib.suppress(OSError):
            write_private(self.path, json.dumps(data))


def _live(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    expires = entry.get("expires")
    return isinstance(expires, int | float) and expires > time.time()
