"""The tenancy's records: domains and their projects, users, keypairs, policies, resource
groups, images and virtual folders, as the log has them.

A leaf of the tenancy package: the rules over these (``services.domain.tenancy.admin`` for
administrators' commands, ``services.domain.tenancy.vfolders`` for folders) import them,
never the other way, so neither rule module needs the other's records.
"""

from dataclasses import dataclass, field
from typing import Literal

from events import Access, CreatePreset, GroupSettings, PolicyLevel, ResourcePolicy, Role

__all__ = ["Keypair", "State", "Tenancy", "User", "Vfolder", "presets_for"]

State = Literal["live", "trashed", "purged"]  # a folder's


@dataclass(slots=True)
class Vfolder:
    vfolder_id: str
    name: str
    host: str
    domain: str
    user: str | None  # the owner user, or
    project: str | None  # the owner project (domain/project)
    quota_bytes: int | None
    shares: dict[str, Access] = field(default_factory=dict)  # user:<name>, project:<d/p>
    state: State = "live"
    bytes: int = 0  # as last scanned
    files: int = 0


@dataclass(slots=True)
class User:
    user: str
    domain: str
    role: Role
    projects: dict[str, None]  # names of projects of ``domain``
    default_project: str | None


@dataclass(slots=True)
class Keypair:
    """An access key and the salted hash of its secret; of a user, or of a service."""

    access_key: str
    secret_hash: str
    user: str | None = None
    service: str | None = None
    revoked: bool = False


@dataclass(slots=True)
class Tenancy:
    domains: dict[str, dict[str, None]] = field(default_factory=dict)  # domain -> projects
    users: dict[str, User] = field(default_factory=dict)
    keypairs: dict[str, Keypair] = field(default_factory=dict)
    policies: dict[tuple[PolicyLevel, str], ResourcePolicy] = field(default_factory=dict)
    groups: dict[str, GroupSettings] = field(default_factory=dict)  # resource groups
    # Per domain: the images its sessions may run (absent: every image), and its aliases
    # (a name a request may use -> the image it runs). Rules: services.domain.scheduling.images.
    images: dict[str, tuple[str, ...]] = field(default_factory=dict)
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)
    vfolders: dict[str, Vfolder] = field(default_factory=dict)  # by id, trashed ones too
    # Resource presets by (domain, name); domain "" for those of every domain.
    presets: dict[tuple[str, str], CreatePreset] = field(default_factory=dict)

    @property
    def on(self) -> bool:
        """Whether the cluster has tenancy (a domain exists): keys then need keypairs."""
        return bool(self.domains)

    def user_of(self, access_key: str) -> User | None:
        """The user a live keypair belongs to; None for a service, an unknown or revoked key."""
        kp = self.keypairs.get(access_key)
        if kp is None or kp.revoked or kp.user is None:
            return None
        return self.users.get(kp.user)


def presets_for(t: Tenancy, domain: str | None) -> list[CreatePreset]:
    """The presets a member of ``domain`` is offered: those of every domain, then its
    domain's, each by name."""
    return [t.presets[k] for k in sorted(t.presets) if k[0] in ("", domain)]
