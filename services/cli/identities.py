"""Who each connection of a process speaks as, on a server with authentication on.

A person or a part of the cluster connects with its access key as user and its secret
as password, and receives its replies in an inbox of its own (``_INBOX.<key>``): the only
one its permissions let it read. Without a secret a connection is anonymous, which only
an open server (the tests', a cluster without tenancy) lets in.

``fgpu up`` is its own administrator: it writes its server's secrets, and keypairs for
the services it runs, into its store directory (readable by its owner only), so that the
same store started again speaks as the same services.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from services.cli.home import write_private
from services.domain.access.permissions import inbox

if TYPE_CHECKING:
    from services.adapters.nats_client import ConnectOptions
    from services.ports import EventLog

__all__ = ["Identity", "kept_service_key", "service_keys"]


@dataclass(frozen=True)
class Identity:
    access_key: str
    secret: str | None = None

    def options(self) -> "ConnectOptions":
        """nats-py's options to connect as this identity (none: anonymously)."""
        if self.secret is None:
            return {}
        return {
            "user": self.access_key,
            "password": self.secret,
            "inbox_prefix": inbox(self.access_key),
        }


async def service_keys(log: "EventLog", store: Path, kinds: list[str]) -> dict[str, Identity]:
    """A keypair for each service of ``kinds`` (``quota``, ``agent:<id>``, ...): those kept
    in ``store/services.json``, and new ones for the others, applied onto the tenancy as
    the system's (``log`` is the administrator's connection) and kept there too."""
    from events import CreateServiceKey
    from events import subjects as subj
    from services.actors.bootstrap import system_applied
    from services.adapters.system_clock import SystemClock
    from services.domain.access.keys import hash_secret, new_access_key, new_secret

    path = store / "services.json"
    try:
        kept = {k: Identity(**v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, TypeError):
        kept = {}
    for kind in kinds:
        if kind in kept:
            continue
        key, secret = new_access_key("SK"), new_secret()
        command = CreateServiceKey(access_key=key, service=kind, secret_hash=hash_secret(secret))
        await log.append(subj.TENANCY, system_applied(command, SystemClock()))
        kept[kind] = Identity(key, secret)
    write_private(
        path,
        json.dumps({k: {"access_key": v.access_key, "secret": v.secret} for k, v in kept.items()}),
    )
    return kept


def kept_service_key(path: Path, kind: str) -> Identity:
    """The keypair of service ``kind`` kept in ``path`` (a services.json). Raises
    ValueError (with what to do) if there is none."""
    try:
        found = json.loads(path.read_text())[kind]
        return Identity(str(found["access_key"]), str(found["secret"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"no keypair of service {kind!r} in {path}: fgpu admin init --service {kind} makes one"
        ) from e
