"""Who may connect to fgpu's NATS server: the auth callout's configuration and secrets.

Every client but four static users goes through the auth callout (fgpu's gatekeeper),
which checks its access key and secret against the tenancy on the log and hands out its
permissions (``services.domain.access.permissions``). The static users are the gatekeeper's own
ways in, which cannot wait on the gatekeeper:

    fgpu-auth   account AUTH: answers the server's authorization requests
    fgpu-gate   account FGPU: reads the log (the tenancy the gatekeeper decides on)
    fgpu-setup  account FGPU: creates or updates the stream, and writes the first tenancy
    fgpu-sys    system account: disconnects a revoked key's connections

Accounts: the cluster's services and its log live in FGPU (JetStream is enabled there);
people are placed in USERS (superadmins, who administer the stream, in FGPU), which
reaches FGPU only through the subjects FGPU exports to
it (``PEOPLE_SERVICE_IMPORTS``, ``PEOPLE_STREAM_IMPORTS``), so a reply subject a person
names stays in USERS; AUTH holds the callout service; SYS is the system account. Secrets
(the issuer's account seed, the static users' passwords) never leave the file ``save``
writes, readable by its owner only.
"""

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from services.adapters.nats_jwt import new_account_seed, public_key
from services.domain.access.permissions import (
    PEOPLE_ACCOUNT,
    PEOPLE_SERVICE_IMPORTS,
    PEOPLE_STREAM_IMPORTS,
    PROVISION_READERS,
    READERS_ACCOUNT,
    READERS_SERVICE_IMPORTS,
    READERS_STREAM_IMPORTS,
    SERVICES_ACCOUNT,
    STREAM_ADMIN,
    Permissions,
    inbox,
    service_permissions,
)

__all__ = ["SETUP_PERMISSIONS", "ServerAuth", "accounts_config"]

AUTH_USER, GATE_USER, SETUP_USER, SYS_USER = "fgpu-auth", "fgpu-gate", "fgpu-setup", "fgpu-sys"


def _known(found: Permissions | None) -> Permissions:
    assert found is not None, "a service of a kind permissions knows"
    return found


# The gatekeeper's static user reads the log as the gatekeeper does, through consumers of
# its own names, and makes and removes readers' consumers as their keypairs come and go.
_AUTH = _known(service_permissions(GATE_USER, "auth"))
_GATE = Permissions(
    publish=(*_AUTH.publish, *PROVISION_READERS),
    subscribe=_AUTH.subscribe,
    deny_publish=_AUTH.deny_publish,
)
SETUP_PERMISSIONS = Permissions(
    publish=(
        *STREAM_ADMIN,
        "fgpu.tenancy",
        *_known(service_permissions(SETUP_USER, "auth")).publish,
    ),
    subscribe=(f"{inbox(SETUP_USER)}.>",),
)


@dataclass(frozen=True)
class ServerAuth:
    """The issuer seed whose account key signs users' permissions, and the passwords of the
    static users (module docstring)."""

    issuer_seed: str
    auth_password: str
    gate_password: str
    setup_password: str
    sys_password: str

    @classmethod
    def generate(cls) -> "ServerAuth":
        def password() -> str:
            return secrets.token_urlsafe(24)

        return cls(new_account_seed(), password(), password(), password(), password())

    @property
    def issuer(self) -> str:
        return public_key(self.issuer_seed)

    def config(self) -> str:
        """The server's configuration of accounts, static users and the auth callout."""
        gate = _permissions(_GATE)
        setup = _permissions(SETUP_PERMISSIONS)
        users = ", ".join(f'"{u}"' for u in (AUTH_USER, GATE_USER, SETUP_USER, SYS_USER))
        services_users = f"""
      {{ user: "{GATE_USER}", password: "{self.gate_password}", permissions: {gate} }}
      {{ user: "{SETUP_USER}", password: "{self.setup_password}", permissions: {setup} }}"""
        return f"""
accounts {{
  AUTH {{ users: [ {{ user: "{AUTH_USER}", password: "{self.auth_password}" }} ] }}
{accounts_config(services_users)}
  SYS {{ users: [ {{ user: "{SYS_USER}", password: "{self.sys_password}" }} ] }}
}}
system_account: SYS
authorization {{
  auth_callout {{
    issuer: "{self.issuer}"
    auth_users: [ {users} ]
    account: AUTH
  }}
}}
"""

    def save(self, directory: Path) -> Path:
        """Write the secrets (``auth.json``) and the server's part (``auth.conf``) into
        ``directory``, both readable by their owner only; the secrets' path."""
        directory.mkdir(parents=True, exist_ok=True)
        _private(directory / "auth.conf", self.config())
        return _private(directory / "auth.json", json.dumps(asdict(self)))

    @classmethod
    def load(cls, directory: Path) -> "ServerAuth":
        """The secrets ``save`` wrote in ``directory``. Raises OSError, ValueError."""
        data = json.loads((directory / "auth.json").read_text())
        try:
            return cls(**data)
        except TypeError as e:
            raise ValueError(f"{directory / 'auth.json'} holds no fgpu server secrets") from e


def accounts_config(services_users: str = "") -> str:
    """The services' account (JetStream on, ``services_users`` as its static users),
    people's and readers', with what the first exports and the others import."""
    # account -> (its service imports, its stream imports), all of the services' account
    importers = {
        PEOPLE_ACCOUNT: (PEOPLE_SERVICE_IMPORTS, PEOPLE_STREAM_IMPORTS),
        READERS_ACCOUNT: (READERS_SERVICE_IMPORTS, READERS_STREAM_IMPORTS),
    }

    def lines(kind: str, subjects: tuple[str, ...], source: str) -> list[str]:
        return [f'      {{ {kind}: {{ {source}subject: "{s}" }} }}' for s in subjects]

    exports = "\n".join(
        f'      {{ {kind}: "{s}" }}'
        for services, streams in importers.values()
        for kind, subjects in (("service", services), ("stream", streams))
        for s in subjects
    )
    others = "".join(
        f"""
  {account} {{
    imports: [
{
            chr(10).join(
                [
                    *lines("service", services, f"account: {SERVICES_ACCOUNT}, "),
                    *lines("stream", streams, f"account: {SERVICES_ACCOUNT}, "),
                ]
            )
        }
    ]
  }}"""
        for account, (services, streams) in importers.items()
    )
    return f"""  {SERVICES_ACCOUNT} {{
    jetstream: enabled
    users: [{services_users}
    ]
    exports: [
{exports}
    ]
  }}{others}"""


def _permissions(p: Permissions) -> str:
    def listed(subjects: tuple[str, ...]) -> str:
        return "[" + ", ".join(f'"{s}"' for s in subjects) + "]"

    return (
        f"{{ publish: {{ allow: {listed(p.publish)}, deny: {listed(p.deny_publish)} }},"
        f" subscribe: {{ allow: {listed(p.subscribe)} }} }}"
    )


def _private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
