"""Who may read what of the cluster's history: a viewer's scope.

A person reads the cluster through the read API, which answers only with what the
person's scope covers: a user its own sessions (and the events naming its keys or its
sessions), a domain admin its domain's, a superadmin everything. Agents' capacity and
occupancy are everyone's to see; the sessions behind the shares are not. Services read the
log through consumers of their own and have no scope here.

A cluster with no tenancy (an open development server, where anyone may read the stream
through NATS) has nothing to keep apart: its viewer is ``OPEN``, who sees everything.
Once a domain exists, every viewer is a keypair's person. Pure.
"""

from dataclasses import dataclass

from events import Role
from services.domain.tenancy.model import Tenancy

__all__ = ["OPEN", "Scope", "Viewer", "sees_group", "sees_policy", "sees_user", "viewer_of"]


@dataclass(frozen=True, slots=True)
class Scope:
    """What a viewer sees: everything, or the sessions of ``domain`` (a domain admin) or
    of ``user`` (or owned by one of ``keys``), and the events naming one of ``keys`` or one
    of those sessions."""

    everything: bool
    domain: str | None = None
    user: str | None = None
    keys: frozenset[str] = frozenset()

    def sees_session(self, owner: str, user: str | None, domain: str) -> bool:
        """Whether a session of ``owner`` (its access key), ``user`` and ``domain`` is in
        scope."""
        if self.everything:
            return True
        if self.domain is not None:
            return domain == self.domain or owner in self.keys
        return (self.user is not None and user == self.user) or owner in self.keys

    def sees_key(self, access_key: str | None) -> bool:
        return self.everything or (access_key is not None and access_key in self.keys)


@dataclass(frozen=True, slots=True)
class Viewer:
    """A person reading, by one of its keypairs: ``user`` None only for ``OPEN``."""

    access_key: str
    user: str | None
    role: Role
    domain: str | None
    scope: Scope


OPEN = Viewer("", None, Role.SUPERADMIN, None, Scope(everything=True))


def viewer_of(t: Tenancy, access_key: str) -> Viewer | str:
    """The viewer a live keypair of a person is, or why it may not read (a service's
    keypair, an unknown or revoked one, a removed user)."""
    kp = t.keypairs.get(access_key)
    if kp is None or kp.revoked:
        return f"access key {access_key!r} is unknown or revoked"
    if kp.service is not None:
        return f"access key {access_key} is the {kp.service} service's: services read the log"
    user = t.user_of(access_key)
    if user is None:
        return f"the user of access key {access_key} was removed"
    scope: Scope
    if user.role is Role.SUPERADMIN:
        scope = Scope(everything=True)
    elif user.role is Role.DOMAIN_ADMIN:
        members = {name for name, u in t.users.items() if u.domain == user.domain}
        keys = frozenset(k for k, p in t.keypairs.items() if p.user in members)
        scope = Scope(everything=False, domain=user.domain, keys=keys)
    else:
        keys = frozenset(k for k, p in t.keypairs.items() if p.user == user.user)
        scope = Scope(everything=False, user=user.user, keys=keys)
    return Viewer(access_key, user.user, user.role, user.domain, scope)


def sees_user(t: Tenancy, v: Viewer, name: str | None) -> bool:
    """Whether ``v`` sees user ``name`` (and its keypairs): itself, or its domain's."""
    if v.scope.everything:
        return True
    if name is None:
        return False  # a service's
    if v.scope.domain is not None:
        u = t.users.get(name)
        return u is not None and u.domain == v.scope.domain
    return name == v.user


def sees_policy(t: Tenancy, v: Viewer, level: str, target: str) -> bool:
    """Whether ``v`` sees the policy of ``level`` on ``target``: those of its domain (a
    domain admin), or those that apply to its own sessions (a user)."""
    if v.scope.everything:
        return True
    domain = v.scope.domain or v.domain
    match level:
        case "domain":
            return target == domain
        case "project":
            d, _, p = target.partition("/")
            if v.scope.domain is not None:
                return d == domain
            u = t.users.get(v.user or "")
            return d == domain and u is not None and p in u.projects
        case "user":
            return sees_user(t, v, target)
        case _:
            return v.scope.sees_key(target)


def sees_group(t: Tenancy, v: Viewer, projects: tuple[str, ...] | None) -> bool:
    """Whether ``v`` sees a resource group open to ``projects`` (None: to every project):
    a superadmin every group, a domain admin those open to a project of its domain, a
    user those open to one of its projects (the groups it may ask for)."""
    if v.scope.everything or projects is None:
        return True
    domain = v.scope.domain or v.domain
    if v.scope.domain is not None:
        return any(key.partition("/")[0] == domain for key in projects)
    u = t.users.get(v.user or "")
    return u is not None and any(f"{u.domain}/{p}" in projects for p in u.projects)
