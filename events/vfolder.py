"""Virtual folders: directories of a user or a project that sessions mount and the storage
service fills.

A folder's life is tenancy: it is created, shared, unshared, moved to the trash and purged
by an ``AdminRequested`` carrying one of the commands below, which the registrar applies
(``AdminApplied``) or refuses (``AdminRefused``) after checking who asks. Its bytes are
not events; what the storage service finds when it scans a folder is
(``VfolderScanned``, on ``fgpu.storage.<host>``).
"""

from typing import Literal

import msgspec

from events.base import Event

__all__ = [
    "Access",
    "CreateVfolder",
    "PurgeVfolders",
    "RemoveVfolder",
    "ShareVfolder",
    "UnshareVfolder",
    "VfolderCommand",
    "VfolderMount",
    "VfolderScanned",
]

Access = Literal["ro", "rw"]  # read-only, read-write


class _VfolderCommand(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False
):
    """What a user or administrator asks of a folder: variants of ``AdminCommand``."""


class CreateVfolder(_VfolderCommand, frozen=True, kw_only=True, tag="create-vfolder"):
    """A folder ``name`` (unique among its owner's live folders) with id ``vfolder_id``
    (unique for good: its directory's name), on storage host ``host``. Owned by ``user``
    or, when ``project`` (``domain/project``) is given, by that project. ``quota_bytes``:
    the most its files may hold (None: no limit)."""

    vfolder_id: str
    name: str
    host: str = "local"
    user: str | None = None
    project: str | None = None
    quota_bytes: int | None = None


class ShareVfolder(_VfolderCommand, frozen=True, kw_only=True, tag="share-vfolder"):
    """Let a user (``user:<name>``) or a project's members (``project:<domain/project>``)
    mount and read the folder (``ro``), or also write it (``rw``). Sharing again changes
    the access."""

    vfolder_id: str
    target: str
    access: Access = "ro"


class UnshareVfolder(_VfolderCommand, frozen=True, kw_only=True, tag="unshare-vfolder"):
    vfolder_id: str
    target: str


class RemoveVfolder(_VfolderCommand, frozen=True, kw_only=True, tag="remove-vfolder"):
    """The folder goes to the trash: nobody may mount, upload to or download from it, and
    its name is free again; its files stay until an administrator empties the trash."""

    vfolder_id: str


class PurgeVfolders(_VfolderCommand, frozen=True, kw_only=True, tag="purge-vfolders"):
    """Empty the trash: the folders ``vfolder_ids`` name (each in the trash) are gone for
    good, and the storage service deletes their files."""

    vfolder_ids: tuple[str, ...]


VfolderCommand = CreateVfolder | ShareVfolder | UnshareVfolder | RemoveVfolder | PurgeVfolders


class VfolderMount(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A folder a session asks to have mounted at ``/home/work/<name>``: ``name`` is the
    folder's name (or id) as its user sees it; ``read_only`` mounts it so even when the
    user may write it. ``at``: mounted there instead (``/pipeline`` alone: a pipeline
    run's folder, in each of its tasks); None in every request from before it."""

    name: str
    read_only: bool = False
    at: str | None = None


class VfolderScanned(Event, frozen=True, kw_only=True, tag="vfolder.scanned.v1"):
    """The storage service of ``host`` counted what folder ``vfolder_id`` holds:
    ``bytes`` (the sum of its files' sizes) in ``files`` files."""

    host: str
    vfolder_id: str
    bytes: int
    files: int
