"""Who the CLI speaks as: an access key and its secret.

``--access-key``, else ``$FGPU_ACCESS_KEY`` (with ``$FGPU_SECRET_KEY``), else the keypair
``fgpu login`` (or ``fgpu up``) stored in ``$FGPU_HOME/credentials``, readable by its
owner only (mode 0600). Without any, the key ``user`` and no secret: enough for a
cluster that has no tenancy.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

from services.cli.home import fgpu_home, write_private

__all__ = ["Credentials", "credentials_file", "resolve", "save"]

ANONYMOUS = "user"


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str | None = None


def credentials_file() -> Path:
    return fgpu_home() / "credentials"


def _stored() -> Credentials | None:
    try:
        data = json.loads(credentials_file().read_text())
        return Credentials(str(data["access_key"]), str(data["secret_key"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve(access_key: str | None) -> Credentials:
    """The keypair to speak as (see the module's docstring)."""
    if access_key is not None:
        stored = _stored()
        secret = os.environ.get("FGPU_SECRET_KEY")
        if secret is None and stored is not None and stored.access_key == access_key:
            secret = stored.secret_key
        return Credentials(access_key, secret)
    env = os.environ.get("FGPU_ACCESS_KEY")
    if env:
        return Credentials(env, os.environ.get("FGPU_SECRET_KEY"))
    return _stored() or Credentials(ANONYMOUS)


def save(c: Credentials) -> Path:
    """Store ``c`` as the keypair to speak as, readable by this user only; its path."""
    path = credentials_file()
    write_private(path, json.dumps({"access_key": c.access_key, "secret_key": c.secret_key}))
    return path
