"""Events of tenancy: who may use the cluster, in which domain and project, within what.

An administrator asks (``AdminRequested``, on ``fgpu.admin.<access key>.<id>``); the
registrar actor checks the requester's role against the tenancy as the log has it and
answers on ``fgpu.tenancy``: ``AdminApplied`` (the command, as it now holds) or
``AdminRefused`` (why). Only ``AdminApplied`` changes anything. A secret never stands on
the log: a keypair carries the salted hash of its secret (``secret_hash``), made where the
secret was made and shown once.
"""

from enum import StrEnum
from typing import Literal

import msgspec

from events.base import Event
from events.slots import Slots
from events.vfolder import (
    CreateVfolder,
    PurgeVfolders,
    RemoveVfolder,
    ShareVfolder,
    UnshareVfolder,
)

__all__ = [
    "AddMember",
    "AdminApplied",
    "AdminCommand",
    "AdminRefused",
    "AdminRequested",
    "CreateDomain",
    "CreateKeypair",
    "CreateProject",
    "CreateServiceKey",
    "CreateUser",
    "PolicyLevel",
    "RemoveMember",
    "RemoveProject",
    "RemoveUser",
    "ResourcePolicy",
    "RevokeKeypair",
    "Role",
    "SetPolicy",
    "SetRole",
]


class Role(StrEnum):
    USER = "user"  # uses the cluster in the projects it belongs to
    DOMAIN_ADMIN = "domain-admin"  # manages its domain's projects, users and policies
    SUPERADMIN = "superadmin"  # everything


class PolicyLevel(StrEnum):
    KEYPAIR = "keypair"
    USER = "user"
    PROJECT = "project"
    DOMAIN = "domain"


class ResourcePolicy(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False
):
    """Limits on what is held at one level; None: no limit. Which limits a level takes:

    keypair: max_sessions (concurrent), max_pending_sessions, max_pending_slots,
    total_slots, max_priority; user: total_slots, max_sessions; project and domain:
    total_slots. A session holds its slots from admission until it ends; it is pending
    from admission until it is placed.
    """

    max_sessions: int | None = None
    max_pending_sessions: int | None = None
    max_pending_slots: Slots | None = None
    total_slots: Slots | None = None
    max_priority: int | None = None


class _Command(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """What an administrator asks for: the variants of ``AdminCommand``."""


class CreateDomain(_Command, frozen=True, kw_only=True, tag="create-domain"):
    domain: str


class CreateProject(_Command, frozen=True, kw_only=True, tag="create-project"):
    domain: str
    project: str


class RemoveProject(_Command, frozen=True, kw_only=True, tag="remove-project"):
    domain: str
    project: str


class CreateUser(_Command, frozen=True, kw_only=True, tag="create-user"):
    """A user of ``domain``, member of ``projects`` (of that domain); sessions go to
    ``default_project`` unless they name another."""

    user: str
    domain: str
    role: Role = Role.USER
    projects: tuple[str, ...] = ()
    default_project: str | None = None


class RemoveUser(_Command, frozen=True, kw_only=True, tag="remove-user"):
    """The user leaves; its keypairs are revoked with it. Its sessions run on."""

    user: str


class SetRole(_Command, frozen=True, kw_only=True, tag="set-role"):
    user: str
    role: Role


class AddMember(_Command, frozen=True, kw_only=True, tag="add-member"):
    user: str
    project: str  # of the user's domain


class RemoveMember(_Command, frozen=True, kw_only=True, tag="remove-member"):
    user: str
    project: str


class CreateKeypair(_Command, frozen=True, kw_only=True, tag="create-keypair"):
    """A keypair of ``user``: ``secret_hash`` is ``scrypt$n$r$p$salt$hash`` (base64)."""

    access_key: str
    user: str
    secret_hash: str


class CreateServiceKey(_Command, frozen=True, kw_only=True, tag="create-service-key"):
    """A keypair of a part of the cluster, not of a person: ``service`` is ``quota``,
    ``scheduler``, ``registrar``, ``api``, ``auth`` or ``agent:<agent id>``."""

    access_key: str
    service: str
    secret_hash: str


class RevokeKeypair(_Command, frozen=True, kw_only=True, tag="revoke-keypair"):
    access_key: str


class SetPolicy(_Command, frozen=True, kw_only=True, tag="set-policy"):
    """The policy of one keypair, user, project (``domain/project``) or domain; it acts on
    admission from now on and never ends a session already admitted."""

    level: PolicyLevel
    target: str
    policy: ResourcePolicy


AdminCommand = (
    CreateDomain
    | CreateProject
    | RemoveProject
    | CreateUser
    | RemoveUser
    | SetRole
    | AddMember
    | RemoveMember
    | CreateKeypair
    | CreateServiceKey
    | RevokeKeypair
    | SetPolicy
    | CreateVfolder
    | ShareVfolder
    | UnshareVfolder
    | RemoveVfolder
    | PurgeVfolders
)


class AdminRequested(Event, frozen=True, kw_only=True, tag="admin.requested.v1"):
    """An administrator (``requester``, the access key the server let in) asks."""

    requester: str
    command: AdminCommand


class AdminApplied(Event, frozen=True, kw_only=True, tag="admin.applied.v1"):
    """The registrar found the request allowed: ``command`` now holds. ``requester`` is
    ``system`` for the changes a cluster starts with (``fgpu up``, ``fgpu admin init``)."""

    requester: str
    command: AdminCommand


class AdminRefused(Event, frozen=True, kw_only=True, tag="admin.refused.v1"):
    """The registrar refused the request; ``code`` says how (``forbidden``, ``invalid``,
    ``conflict``), ``reason`` says why, in words."""

    requester: str
    code: Literal["forbidden", "invalid", "conflict"]
    reason: str
