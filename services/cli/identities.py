"""The service keypairs this host keeps (each connection speaks as an
``services.wiring.identity.Identity``).

``fgpu up`` is its own administrator: it writes its server's secrets, and keypairs for
the services it runs, into its store directory (readable by its owner only), so that the
same store started again speaks as the same services.
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING

from services.cli.home import write_private
from services.wiring.identity import Identity

if TYPE_CHECKING:
    from services.ports import EventLog

__all__ = ["kept_service_key", "service_keys"]


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
