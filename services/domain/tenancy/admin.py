"""Tenancy as the log has it: domains and their projects, users, keypairs, policies.

``apply`` folds a command the registrar applied (``AdminApplied``); ``refusal`` says
whether a requester may have a command applied, and why not. Both are pure. A cluster
whose log holds no domain has no tenancy yet (a log from before it, or a cluster never
set up): every access key is then its own tenant in the ``default`` domain and project,
as sessions from before tenancy are.
"""

import re

from events import (
    AddMember,
    AdminCommand,
    CreateDomain,
    CreateGroup,
    CreateKeypair,
    CreatePreset,
    CreateProject,
    CreateServiceKey,
    CreateUser,
    PolicyLevel,
    RemoveGroup,
    RemoveMember,
    RemovePreset,
    RemoveProject,
    RemoveUser,
    ResourcePolicy,
    RevokeKeypair,
    Role,
    SetImageAlias,
    SetImages,
    SetPolicy,
    SetRole,
    UpdateGroup,
    VfolderCommand,
)
from events import subjects as subj
from services.domain.image_ref import image_reference_problem
from services.domain.refusal import Refusal
from services.domain.resources import MAX_AMOUNT
from services.domain.tenancy.groups import DEFAULT_GROUP, invalid_group_command
from services.domain.tenancy.model import Keypair, Tenancy, User
from services.domain.tenancy.vfolders import apply_vfolder, vfolder_refusal

__all__ = [
    "DEFAULT",
    "SERVICES",
    "Keypair",
    "Refusal",
    "Tenancy",
    "User",
    "apply",
    "key_domain",
    "project_key",
    "reader_domain",
    "refusal",
]

DEFAULT = "default"  # the domain and project of sessions from before tenancy
# The parts of a cluster that hold keypairs of their own (agents: ``agent:<id>``).
# ``agent-host`` speaks for every agent of one process (simulated agents, benchmarks):
# a superadmin's choice, as every service keypair is.
# Readers (``reader``, or ``reader:<domain>``) are integrations' keypairs: they read the
# log (a domain's part of it) through a consumer of their own, and nothing else.
SERVICES = frozenset(
    {
        "quota",
        "scheduler",
        "registrar",
        "serving",
        "api",
        "auth",
        "agent-host",
        "archiver",
        "intake",
        "pipeline",
        "domain-feed",
        "reader",
    }
)
READER = "reader"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}")
_LIMITS: dict[PolicyLevel, frozenset[str]] = {
    PolicyLevel.KEYPAIR: frozenset(
        {"max_sessions", "max_pending_sessions", "max_pending_slots", "total_slots", "max_priority"}
    ),
    PolicyLevel.USER: frozenset({"total_slots", "max_sessions"}),
    PolicyLevel.PROJECT: frozenset({"total_slots"}),
    PolicyLevel.DOMAIN: frozenset({"total_slots"}),
}


def reader_domain(service: str | None) -> str | None:
    """The domain a reader keypair of ``service`` reads (``reader:<domain>``); None for any
    other service, and for a reader of the whole log (``reader``)."""
    kind, sep, domain = (service or "").partition(":")
    return domain if kind == READER and sep else None


def key_domain(t: Tenancy, access_key: str) -> str | None:
    """The domain an access key belongs to, revoked or not: its user's, or a domain
    reader's; None for an unknown key, another service's, or a removed user's."""
    kp = t.keypairs.get(access_key)
    if kp is None:
        return None
    if kp.user is not None:
        u = t.users.get(kp.user)
        return None if u is None else u.domain
    return reader_domain(kp.service)


def project_key(domain: str, project: str) -> str:
    """A project's name across domains: ``domain/project``."""
    return f"{domain}/{project}"


def apply(t: Tenancy, c: AdminCommand) -> None:
    """Fold a command the registrar applied. One that no longer fits (a project gone since)
    changes what still fits and nothing else."""
    match c:
        case CreateDomain(domain=d):
            t.domains.setdefault(d, {})
        case CreateProject(domain=d, project=p) if d in t.domains:
            t.domains[d][p] = None
        case RemoveProject(domain=d, project=p) if d in t.domains:
            t.domains[d].pop(p, None)
            for u in t.users.values():
                if u.domain == d:
                    u.projects.pop(p, None)
                    if u.default_project == p:
                        u.default_project = None
        case CreateUser() if c.domain in t.domains and c.user not in t.users:
            projects = dict.fromkeys(p for p in c.projects if p in t.domains[c.domain])
            default = c.default_project if c.default_project in projects else None
            default = default or next(iter(projects), None)  # else its first project
            t.users[c.user] = User(c.user, c.domain, c.role, projects, default)
        case RemoveUser(user=name):
            t.users.pop(name, None)
            for kp in t.keypairs.values():
                if kp.user == name:
                    kp.revoked = True
        case SetRole(user=name, role=role) if name in t.users:
            t.users[name].role = role
        case AddMember(user=name, project=p) if name in t.users:
            u = t.users[name]
            if p in t.domains.get(u.domain, {}):
                u.projects[p] = None
                u.default_project = u.default_project or p
        case RemoveMember(user=name, project=p) if name in t.users:
            u = t.users[name]
            u.projects.pop(p, None)
            if u.default_project == p:
                u.default_project = next(iter(u.projects), None)
        case CreateKeypair() if c.access_key not in t.keypairs and c.user in t.users:
            t.keypairs[c.access_key] = Keypair(c.access_key, c.secret_hash, user=c.user)
        case CreateServiceKey() if c.access_key not in t.keypairs:
            t.keypairs[c.access_key] = Keypair(c.access_key, c.secret_hash, service=c.service)
        case RevokeKeypair(access_key=key) if key in t.keypairs:
            t.keypairs[key].revoked = True
        case SetPolicy(level=level, target=target, policy=policy):
            t.policies[(level, target)] = policy
        case CreateGroup(group=g) if g not in t.groups:
            t.groups[g] = c.settings
        case UpdateGroup(group=g):
            t.groups[g] = c.settings
        case RemoveGroup(group=g):
            t.groups.pop(g, None)
        case SetImages(domain=d, images=None):
            t.images.pop(d, None)
        case SetImages(domain=d, images=names) if names is not None:
            t.images[d] = names
        case SetImageAlias(domain=d, alias=alias, image=None) if d in t.aliases:
            t.aliases[d].pop(alias, None)
            if not t.aliases[d]:  # a domain without aliases has no entry (snapshots alike)
                del t.aliases[d]
        case SetImageAlias(domain=d, alias=alias, image=image) if image is not None:
            t.aliases.setdefault(d, {})[alias] = image
        case CreatePreset() if (c.domain or "", c.name) not in t.presets:
            t.presets[c.domain or "", c.name] = c
        case RemovePreset():
            t.presets.pop((c.domain or "", c.name), None)
        case _ if isinstance(c, VfolderCommand):
            apply_vfolder(t, c)


_CLUSTER_WIDE = (CreateDomain, CreateGroup, UpdateGroup, RemoveGroup)


def refusal(t: Tenancy, requester: str, c: AdminCommand) -> Refusal | None:
    """Why ``requester`` (an access key) may not have ``c`` applied now; None if it may.

    Roles: a superadmin may do anything (resource groups and domains are its alone); a
    domain admin manage its own domain's projects, users (not superadmins), their
    keypairs, the keypair, user and project policies in it, its image allow-list and
    aliases, its resource presets, and its readers' keypairs (presets of every domain are
    a superadmin's); a user create and revoke its own keypairs.
    Services administer nothing. Virtual folders have rules of their own
    (``services.domain.tenancy.vfolders``).
    """
    who = t.user_of(requester)
    if who is None:
        return Refusal("forbidden", f"access key {requester} may not administer the cluster")
    if isinstance(c, VfolderCommand):
        return vfolder_refusal(t, who, c)
    if who.role is Role.USER and not isinstance(c, CreateKeypair | RevokeKeypair):
        return Refusal("forbidden", f"user {who.user} may not {_what(c)}")
    # The cluster's own (domains, resource groups) are refused a domain admin before they
    # are judged valid: what it sees of a group is its domain's part, so an update it
    # builds from that reads as stale ("changed since it was read") when it is forbidden.
    if who.role is Role.DOMAIN_ADMIN and isinstance(c, _CLUSTER_WIDE):
        return Refusal("forbidden", f"{who.role} {who.user} may not {_what(c)}")
    problem = _invalid(t, c)
    if problem is not None:
        return problem
    if who.role is Role.SUPERADMIN:
        return None
    domain = _domain_of(t, c)
    if who.role is Role.DOMAIN_ADMIN and domain == who.domain and _admin_may(t, c):
        return None
    if _own_keypair(t, who.user, c):
        return None
    return Refusal("forbidden", f"{who.role} {who.user} may not {_what(c)}")


def _admin_may(t: Tenancy, c: AdminCommand) -> bool:
    """What a domain admin may do within its domain."""
    match c:
        case CreateServiceKey(service=service):
            return reader_domain(service) is not None  # its domain's readers; no service
        case CreateDomain() | CreateGroup() | UpdateGroup() | RemoveGroup():
            return False  # cluster-wide: a superadmin's (``_CLUSTER_WIDE``)
        case CreateUser(role=role) | SetRole(role=role):
            target = t.users.get(c.user)
            return role is not Role.SUPERADMIN and (
                target is None or target.role is not Role.SUPERADMIN
            )
        case RemoveUser(user=name) | AddMember(user=name) | RemoveMember(user=name):
            return t.users[name].role is not Role.SUPERADMIN
        case SetPolicy(level=level):
            return level is not PolicyLevel.DOMAIN
        case _:
            return True


def _own_keypair(t: Tenancy, user: str, c: AdminCommand) -> bool:
    match c:
        case CreateKeypair(user=owner):
            return owner == user
        case RevokeKeypair(access_key=key):
            return t.keypairs[key].user == user
        case _:
            return False


def _domain_of(t: Tenancy, c: AdminCommand) -> str | None:
    """The domain a (valid) command acts in; None for one that acts in none."""
    match c:
        case CreateDomain(domain=d) | CreateProject(domain=d) | RemoveProject(domain=d):
            return d
        case CreateUser(domain=d):
            return d
        case RemoveUser(user=n) | SetRole(user=n) | AddMember(user=n) | RemoveMember(user=n):
            return t.users[n].domain
        case CreateKeypair(user=n):
            return t.users[n].domain
        case RevokeKeypair(access_key=key):
            return key_domain(t, key)
        case CreateServiceKey(service=service):
            return reader_domain(service)
        case SetPolicy(level=level, target=target):
            return _policy_domain(t, level, target)
        case SetImages(domain=d) | SetImageAlias(domain=d):
            return d
        case CreatePreset(domain=d) | RemovePreset(domain=d):
            return d  # None (every domain's): no domain admin's
        case _:
            return None


def _policy_domain(t: Tenancy, level: PolicyLevel, target: str) -> str | None:
    if level is PolicyLevel.DOMAIN:
        return target
    if level is PolicyLevel.PROJECT:
        return target.split("/", 1)[0]
    if level is PolicyLevel.USER:
        return t.users[target].domain if target in t.users else None
    owner = t.keypairs[target].user if target in t.keypairs else None
    return t.users[owner].domain if owner in t.users else None


def _invalid(t: Tenancy, c: AdminCommand) -> Refusal | None:
    """Why ``c`` cannot hold as written, or conflicts with what holds; None if it can."""
    match c:
        case CreateDomain(domain=d):
            if not subj.is_token(d):
                return _bad(f"domain {d!r} must be 1-64 letters, digits, '-' or '_'")
            return _taken(f"domain {d} exists") if d in t.domains else None
        case CreateProject() | RemoveProject():
            return _invalid_project(t, c)
        case CreateUser():
            return _invalid_user(t, c)
        case RemoveUser(user=n) | SetRole(user=n):
            return None if n in t.users else _bad(f"no user {n}")
        case AddMember(user=n, project=p) | RemoveMember(user=n, project=p):
            if n not in t.users:
                return _bad(f"no user {n}")
            if p not in t.domains.get(t.users[n].domain, {}):
                return _bad(f"no project {p} in the domain of {n}")
        case CreateKeypair() | CreateServiceKey():
            return _invalid_key(t, c)
        case RevokeKeypair(access_key=key):
            return None if key in t.keypairs else _bad(f"no access key {key}")
        case SetPolicy(level=level, target=target, policy=policy):
            return _invalid_policy(t, level, target, policy)
        case CreateGroup() | UpdateGroup() | RemoveGroup():
            wrong = invalid_group_command(t.groups, t.domains, c)
            if wrong is not None:
                conflict, reason = wrong
                return _taken(reason) if conflict else _bad(reason)
        case SetImages():
            return _invalid_images(t, c)
        case SetImageAlias():
            return _invalid_alias(t, c)
        case CreatePreset() | RemovePreset():
            return _invalid_preset(t, c)
    return None


def _bad(reason: str) -> Refusal:
    return Refusal("invalid", reason)


def _taken(reason: str) -> Refusal:
    return Refusal("conflict", reason)


def _invalid_project(t: Tenancy, c: CreateProject | RemoveProject) -> Refusal | None:
    d, p = c.domain, c.project
    if isinstance(c, RemoveProject):
        return None if p in t.domains.get(d, {}) else _bad(f"no project {project_key(d, p)}")
    if d not in t.domains:
        return _bad(f"no domain {d}")
    if not subj.is_token(p):
        return _bad(f"project {p!r} must be 1-64 letters, digits, '-' or '_'")
    return _taken(f"project {project_key(d, p)} exists") if p in t.domains[d] else None


def _invalid_user(t: Tenancy, c: CreateUser) -> Refusal | None:
    if not _NAME.fullmatch(c.user):
        return _bad(f"user name {c.user!r} must be 1-128 letters, digits, '_.@+-'")
    if c.domain not in t.domains:
        return _bad(f"no domain {c.domain}")
    if c.user in t.users:
        return _taken(f"user {c.user} exists")
    missing = [p for p in c.projects if p not in t.domains[c.domain]]
    if missing:
        return _bad(f"no project {missing[0]} in domain {c.domain}")
    if c.default_project is not None and c.default_project not in c.projects:
        return _bad("the default project must be one of the user's projects")
    return None


def _invalid_key(t: Tenancy, c: CreateKeypair | CreateServiceKey) -> Refusal | None:
    key = c.access_key
    if not subj.is_token(key):
        return _bad(f"access key {key!r} must be 1-64 letters, digits, '-' or '_'")
    if key in t.keypairs:
        return _taken(f"access key {key} exists")
    if isinstance(c, CreateKeypair):
        return None if c.user in t.users else _bad(f"no user {c.user}")
    if not _service(c.service):
        return _bad(f"no service {c.service!r}")
    readers = reader_domain(c.service)
    if readers is not None and readers not in t.domains:
        return _bad(f"no domain {readers}")
    return None


def _invalid_images(t: Tenancy, c: SetImages) -> Refusal | None:
    if c.domain not in t.domains:
        return _bad(f"no domain {c.domain}")
    problems = (image_reference_problem(entry) for entry in c.images or ())
    problem = next((p for p in problems if p is not None), None)
    return None if problem is None else _bad(problem)


def _invalid_alias(t: Tenancy, c: SetImageAlias) -> Refusal | None:
    if c.domain not in t.domains:
        return _bad(f"no domain {c.domain}")
    for ref in (c.alias, c.image):
        problem = None if ref is None else image_reference_problem(ref)
        if problem is not None:
            return _bad(problem)
    if c.image == c.alias:
        return _bad(f"alias {c.alias} would name itself")
    if c.image is None and c.alias not in t.aliases.get(c.domain, {}):
        return _bad(f"no alias {c.alias} in domain {c.domain}")
    return None


def _invalid_preset(t: Tenancy, c: CreatePreset | RemovePreset) -> Refusal | None:
    where = f"domain {c.domain}" if c.domain is not None else "every domain"
    if c.domain is not None and c.domain not in t.domains:
        return _bad(f"no domain {c.domain}")
    exists = (c.domain or "", c.name) in t.presets
    if isinstance(c, RemovePreset):
        return None if exists else _bad(f"no preset {c.name} of {where}")
    if not subj.is_token(c.name):
        return _bad(f"preset {c.name!r} must be 1-64 letters, digits, '-' or '_'")
    if exists:
        return _taken(f"preset {c.name} of {where} exists")
    if c.group is not None and c.group not in t.groups and c.group != DEFAULT_GROUP:
        return _bad(f"no resource group {c.group}")
    s = c.slots
    if min(s.cpu, s.mem) <= 0 or s.fgpu < 0:
        return _bad("a preset holds some CPU and memory, and no negative fGPU")
    if max(s.cpu, s.mem, s.fgpu) > MAX_AMOUNT:
        return _bad("a preset's amounts must be at most what any cluster holds")
    return None


def _invalid_policy(
    t: Tenancy, level: PolicyLevel, target: str, policy: ResourcePolicy
) -> Refusal | None:
    known = {
        PolicyLevel.KEYPAIR: target in t.keypairs,
        PolicyLevel.USER: target in t.users,
        PolicyLevel.DOMAIN: target in t.domains,
        PolicyLevel.PROJECT: "/" in target
        and target.split("/", 1)[1] in t.domains.get(target.split("/", 1)[0], {}),
    }[level]
    if not known:
        return Refusal("invalid", f"no {level} {target}")
    given = {name for name in policy.__struct_fields__ if getattr(policy, name) is not None}
    extra = sorted(given - _LIMITS[level])
    if extra:
        allowed = ", ".join(sorted(_LIMITS[level]))
        return Refusal("invalid", f"a {level} policy takes {allowed}; not {', '.join(extra)}")
    counts = (policy.max_sessions, policy.max_pending_sessions, policy.max_priority)
    if any(n is not None and n < 0 for n in counts):
        return Refusal("invalid", "a policy's counts must not be negative")
    return None


def _service(name: str) -> bool:
    kind, _, suffix = name.partition(":")
    return name in SERVICES or (kind in ("agent", "router", READER) and subj.is_token(suffix))


def _what(c: AdminCommand) -> str:
    """``c``'s action in words, for a refusal."""
    return str(c.__struct_config__.tag).replace("-", " ")
