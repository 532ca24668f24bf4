"""Virtual folders as the log has them, and who may do what with them. Pure.

A folder belongs to a user or to a project (``domain/project``) and lives on one storage
host, as the directory ``<root>/<host>/<vfolder id>`` (``folder_dir``). Its owner user, or
every member of its owner project, reads and writes it; a share lets another user, or a
project's members, read it (``ro``) or also write it (``rw``). Its owner user and the
administrators of its domain (domain admins, superadmins) manage it: share, unshare, move
to the trash. Only those administrators empty the trash. Administrators manage folders,
they do not read them: to read one they share it with themselves, which the log records.

Every rule here is a pure function of the tenancy (``Tenancy.vfolders``), so the registrar
(requests), the quota actor (mounts at admission), the agent (mounts at start) and the
storage service (uploads and downloads) judge alike.
"""

import re
from dataclasses import dataclass

from events import (
    Access,
    CreateVfolder,
    PurgeVfolders,
    RemoveVfolder,
    Role,
    ShareVfolder,
    UnshareVfolder,
    VfolderCommand,
    VfolderMount,
    VfolderScanned,
)
from events import subjects as subj
from services.domain.records import AgentView
from services.domain.refusal import Refusal
from services.domain.tenancy.model import Tenancy, User, Vfolder

__all__ = [
    "MAX_MOUNTS",
    "MOUNT_ROOT",
    "PIPELINE_MOUNT",
    "STORAGE_UID",
    "Placed",
    "Vfolder",
    "access_of",
    "apply_vfolder",
    "find",
    "folder_dir",
    "manages",
    "mount_plan",
    "mounts_all",
    "note_scan",
    "vfolder_refusal",
]

MOUNT_ROOT = "/home/work"  # a session's folders are mounted at <this>/<name>
# The other place a folder may be mounted (``VfolderMount.at``): a pipeline run's folder.
PIPELINE_MOUNT = "/pipeline"
MAX_MOUNTS = 16
# The uid and gid the folders are kept as when fgpu runs as root and nobody chose one (the
# root's owner, or --storage-uid): not root, not nobody (which other daemons share),
# outside the ranges distributions give to people (1000-60000) and to system users.
STORAGE_UID = 61_000
# A folder's name is a directory's name in the container: no '/', never '.' nor '..'.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True)
class Placed:
    """A folder as one session mounts it."""

    vfolder: Vfolder
    target: str  # in the container
    read_only: bool


def mounts_all(a: "AgentView", hosts: tuple[str, ...]) -> bool:
    """Whether agent ``a`` mounts the folders of every storage host in ``hosts``."""
    return a.storage_hosts is None or all(h in a.storage_hosts for h in hosts)


def folder_dir(root: str, f: Vfolder) -> str:
    """The folder's directory under a storage root (where the host's folders are)."""
    return f"{root.rstrip('/')}/{f.host}/{f.vfolder_id}"


def apply_vfolder(t: "Tenancy", c: VfolderCommand) -> None:
    """Fold a folder command the registrar applied (checked then; here only what still
    fits changes)."""
    folders = t.vfolders
    match c:
        case CreateVfolder() if c.vfolder_id not in folders:
            domain = _owner_domain(t, c.user, c.project)
            if domain is not None:
                folders[c.vfolder_id] = Vfolder(
                    c.vfolder_id, c.name, c.host, domain, c.user, c.project, c.quota_bytes
                )
        case ShareVfolder(vfolder_id=i) if i in folders and folders[i].state == "live":
            folders[i].shares[c.target] = c.access
        case UnshareVfolder(vfolder_id=i) if i in folders:
            folders[i].shares.pop(c.target, None)
        case RemoveVfolder(vfolder_id=i) if i in folders and folders[i].state == "live":
            folders[i].state = "trashed"
        case PurgeVfolders(vfolder_ids=ids):
            for i in ids:
                if i in folders and folders[i].state == "trashed":
                    folders[i].state = "purged"


def note_scan(t: "Tenancy", e: VfolderScanned) -> None:
    f = t.vfolders.get(e.vfolder_id)
    if f is not None and f.host == e.host:
        f.bytes, f.files = e.bytes, e.files


def manages(t: "Tenancy", who: "User", f: Vfolder) -> bool:
    """Whether ``who`` may share, unshare and trash ``f``."""
    if who.role is Role.SUPERADMIN:
        return True
    if who.role is Role.DOMAIN_ADMIN and who.domain == f.domain:
        return True
    return f.user == who.user


def access_of(who: "User", f: Vfolder) -> Access | None:
    """What ``who`` may do with the files of ``f``: read and write, read, or nothing."""
    if f.state != "live":
        return None
    if f.user == who.user or (f.project is not None and _member(who, f.project)):
        return "rw"
    given: list[Access] = []
    for target, access in f.shares.items():
        kind, _, name = target.partition(":")
        if (kind == "user" and name == who.user) or (kind == "project" and _member(who, name)):
            given.append(access)
    return "rw" if "rw" in given else "ro" if given else None


def find(t: "Tenancy", who: "User", name: str) -> Vfolder | str:
    """The live folder ``who`` calls ``name`` (its name, or its id) and may use; or why
    there is none. Of several of that name, the user's own wins; else it is ambiguous."""
    mine = [
        f
        for f in t.vfolders.values()
        if (f.name == name or f.vfolder_id == name) and access_of(who, f) is not None
    ]
    exact = [f for f in mine if f.vfolder_id == name]
    own = [f for f in mine if f.user == who.user]
    for group in (exact, own, mine):
        if len(group) == 1:
            return group[0]
        if len(group) > 1:
            ids = ", ".join(sorted(f.vfolder_id for f in group))
            return f"{len(group)} folders called {name!r} ({ids}): name one by its id"
    return f"user {who.user} has no folder {name!r} (or may not use it)"


def mount_plan(t: "Tenancy", owner: str, mounts: tuple[VfolderMount, ...]) -> list[Placed] | str:
    """Where each folder a session of access key ``owner`` asks for is mounted, and how;
    or why it may not have them (the reason a user sees). The request's own shape (how
    many, how long a name) is ``validation.invalid_request``'s to check."""
    if not mounts:
        return []
    who = t.user_of(owner)
    if who is None:
        return f"access key {owner} is not a user's: only users' sessions mount folders"
    placed: list[Placed] = []
    for m in mounts:
        f = find(t, who, m.name)
        if isinstance(f, str):
            return f
        if m.at is not None and m.at != PIPELINE_MOUNT:
            return f"a folder is mounted at {MOUNT_ROOT}/NAME or {PIPELINE_MOUNT}, not {m.at}"
        target = m.at or f"{MOUNT_ROOT}/{f.name}"
        if any(p.target == target for p in placed):
            return f"two folders would be mounted at {target}"
        read_only = m.read_only or access_of(who, f) == "ro"
        placed.append(Placed(f, target, read_only))
    return placed


def vfolder_refusal(t: "Tenancy", who: "User", c: VfolderCommand) -> Refusal | None:
    """Why ``who`` may not have folder command ``c`` applied now; None if it may."""
    match c:
        case CreateVfolder():
            return _create_refusal(t, who, c)
        case PurgeVfolders(vfolder_ids=ids):
            return _purge_refusal(t, who, ids)
        case _:
            f = t.vfolders.get(c.vfolder_id)
            if f is None or f.state != "live":
                return Refusal("invalid", f"no folder {c.vfolder_id}")
            if not manages(t, who, f):
                return Refusal("forbidden", f"{who.role} {who.user} may not manage {f.name}")
            if isinstance(c, ShareVfolder | UnshareVfolder):
                return _share_refusal(t, f, c)
            return None


def _create_refusal(t: "Tenancy", who: "User", c: CreateVfolder) -> Refusal | None:
    if not subj.is_token(c.vfolder_id) or not subj.is_token(c.host):
        return Refusal("invalid", "a folder's id and host must be 1-64 letters, digits, - or _")
    if not _NAME.fullmatch(c.name):
        return Refusal("invalid", f"folder name {c.name!r} must be 1-64 letters, digits, '_.-'")
    if (c.user is None) == (c.project is None):
        return Refusal("invalid", "a folder belongs to a user or to a project: name one")
    if c.quota_bytes is not None and c.quota_bytes <= 0:
        return Refusal("invalid", "a folder's quota must be more than 0 bytes")
    domain = _owner_domain(t, c.user, c.project)
    if domain is None:
        return Refusal("invalid", f"no {'user ' + str(c.user) if c.user else c.project}")
    admin = who.role is Role.SUPERADMIN or (who.role is Role.DOMAIN_ADMIN and who.domain == domain)
    if not admin and c.user != who.user:
        whose = f"user {c.user}" if c.user else f"project {c.project}"
        return Refusal("forbidden", f"{who.role} {who.user} may not create folders of {whose}")
    if c.vfolder_id in t.vfolders:
        return Refusal("conflict", f"folder id {c.vfolder_id} exists")
    for f in t.vfolders.values():
        if f.state == "live" and f.name == c.name and (f.user, f.project) == (c.user, c.project):
            return Refusal("conflict", f"a folder {c.name} exists ({f.vfolder_id})")
    return None


def _share_refusal(t: "Tenancy", f: Vfolder, c: ShareVfolder | UnshareVfolder) -> Refusal | None:
    kind, _, name = c.target.partition(":")
    if kind == "user":
        u = t.users.get(name)
        if u is None or u.domain != f.domain:
            return Refusal("invalid", f"no user {name} in domain {f.domain}")
        if name == f.user:
            return Refusal("invalid", f"{name} owns {f.name}")
    elif kind == "project":
        domain, _, project = name.partition("/")
        if domain != f.domain or project not in t.domains.get(domain, {}):
            return Refusal("invalid", f"no project {name} in domain {f.domain}")
    else:
        return Refusal(
            "invalid", f"share with user:<name> or project:<domain/project>, not {c.target!r}"
        )
    if isinstance(c, UnshareVfolder) and c.target not in f.shares:
        return Refusal("invalid", f"{f.name} is not shared with {c.target}")
    return None


def _purge_refusal(t: "Tenancy", who: "User", ids: tuple[str, ...]) -> Refusal | None:
    if who.role is Role.USER:
        return Refusal("forbidden", f"user {who.user} may not empty the trash")
    for i in ids:
        f = t.vfolders.get(i)
        if f is None or f.state != "trashed":
            return Refusal("invalid", f"folder {i} is not in the trash")
        if not manages(t, who, f):
            return Refusal("forbidden", f"{who.role} {who.user} may not purge {i}")
    return None


def _owner_domain(t: "Tenancy", user: str | None, project: str | None) -> str | None:
    """The domain of a folder's owner, if that owner exists."""
    if user is not None:
        u = t.users.get(user)
        return u.domain if u is not None else None
    domain, _, name = (project or "").partition("/")
    return domain if name in t.domains.get(domain, {}) else None


def _member(who: "User", project: str) -> bool:
    domain, _, name = project.partition("/")
    return domain == who.domain and name in who.projects
