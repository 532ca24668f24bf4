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
    "CreateGroup",
    "CreateKeypair",
    "CreatePreset",
    "CreateProject",
    "CreateServiceKey",
    "CreateUser",
    "GroupSettings",
    "PolicyLevel",
    "QueueOrder",
    "RemoveGroup",
    "RemoveMember",
    "RemovePreset",
    "RemoveProject",
    "RemoveUser",
    "ResourcePolicy",
    "RevokeKeypair",
    "Role",
    "SetImageAlias",
    "SetImages",
    "SetPolicy",
    "SetRole",
    "UpdateGroup",
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


class QueueOrder(StrEnum):
    """Which of a group's pending sessions of one priority goes first."""

    FIFO = "fifo"  # the earliest asked for
    LIFO = "lifo"  # the latest asked for
    DRF = "drf"  # of the user with the least dominant share of the group (cpu, mem, fGPU)


class GroupSettings(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False
):
    """What a resource group does with its sessions. Times in whole seconds; None: no limit.

    ``policy`` names a placement policy (``fgpu scheduler --policy``'s names);
    ``pending_timeout_s`` cancels a session that waited that long (0: at once when nothing
    fits); ``default_lifetime_s`` ends a running session that asked for no lifetime,
    ``max_lifetime_s`` is the most one may ask for; ``idle_timeout_s`` ends one idle that
    long (no kernel launch, no GPU memory in use, no CPU); ``projects`` (``domain/project``)
    may use the group, None: every project. ``fgpu_quantum``: the step of the fGPU a
    session of the group may ask for, in quanta (``FGPU_QUANTUM_PER_UNIT`` to one fGPU: 10
    is 0.1 fGPU); None: the cluster's own step (one quantum, 0.01 fGPU).
    """

    queue: QueueOrder = QueueOrder.FIFO
    policy: str = "fragmentation-aware"
    pending_timeout_s: int | None = None
    default_lifetime_s: int | None = None
    max_lifetime_s: int | None = None
    idle_timeout_s: int | None = None
    projects: tuple[str, ...] | None = None
    fgpu_quantum: int | None = None


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
    ``scheduler``, ``registrar``, ``serving``, ``api``, ``auth``, ``agent:<agent id>`` or
    ``router:<router id>``."""

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


class CreateGroup(_Command, frozen=True, kw_only=True, tag="create-group"):
    """A resource group: agents that declare it serve only sessions that ask for it."""

    group: str
    settings: GroupSettings


class UpdateGroup(_Command, frozen=True, kw_only=True, tag="update-group"):
    """A group's settings replaced whole; they act on the sessions it holds from now on.
    The ``default`` group may be given settings this way without being created.
    ``expected``: the settings the change was made from (a read, then a few fields
    changed); refused as a conflict if the group's are no longer these, so two changes
    made at once cannot undo each other. None: replace whatever they are."""

    group: str
    settings: GroupSettings
    expected: GroupSettings | None = None


class RemoveGroup(_Command, frozen=True, kw_only=True, tag="remove-group"):
    """No new session may ask for the group; those it holds go on under the defaults."""

    group: str


class SetImages(_Command, frozen=True, kw_only=True, tag="set-images"):
    """The images sessions of ``domain`` may run: each entry a name (every tag of it) or
    ``name:tag``. None: no allow-list, every image is allowed (as in a domain that never
    had one); an empty tuple allows none."""

    domain: str
    images: tuple[str, ...] | None = None


class SetImageAlias(_Command, frozen=True, kw_only=True, tag="set-image-alias"):
    """In ``domain``, a request for image ``alias`` runs ``image`` (``python`` ->
    ``fgpu/python:3.11``); resolved at admission. ``image`` None removes the alias."""

    domain: str
    alias: str
    image: str | None = None


class CreatePreset(_Command, frozen=True, kw_only=True, tag="create-preset"):
    """A resource preset: a name for ``slots`` a launch may fill its amounts from. Of
    ``domain`` (its admins', shown to its members), or of every domain (None: a
    superadmin's); ``group``: offered for that resource group only (None: for any)."""

    name: str
    slots: Slots
    domain: str | None = None
    group: str | None = None


class RemovePreset(_Command, frozen=True, kw_only=True, tag="remove-preset"):
    """The preset ``name`` of ``domain`` (None: of every domain) is no longer offered."""

    name: str
    domain: str | None = None


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
    | CreateGroup
    | UpdateGroup
    | RemoveGroup
    | SetImages
    | SetImageAlias
    | CreatePreset
    | RemovePreset
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
