"""Which domains a record of the log belongs to: what a domain's readers are given of it.

A record belongs to the domain of the session it is about, of the access key it names
(an owner, a requester: a user's, or a domain reader's), of the folder or the serving
endpoint it is about, and,
for an administrator's command, of what the command acts in. That is what a domain
admin of that domain is shown of the log through the read API (its domain's sessions,
the events naming its keys or its sessions). Records of no domain (agents, the ledger's
heartbeats, the archive, services' own doings) belong to none. Pure: the domain feed
asks this of the state as the log stood just before and just after the record, so that a
record that ends what it names (a session let go of, a user removed) is still placed.
"""

from events import (
    AdminApplied,
    AdminRefused,
    AdminRequested,
    AnyEvent,
    PolicyLevel,
    SessionRequested,
    SetPolicy,
)
from services.domain.fold.cluster import ClusterState
from services.domain.tenancy.admin import key_domain
from services.domain.tenancy.model import Tenancy

__all__ = ["domains_of"]

# Fields of an event that name an access key whose domain the event belongs to.
_KEYS = ("owner", "requester")


def domains_of(s: ClusterState, e: AnyEvent) -> frozenset[str]:
    """The domains ``e`` belongs to, as ``s`` knows them."""
    t = s.tenancy
    found: set[str] = set()
    sid = getattr(e, "session_id", None)
    if isinstance(sid, str):
        v = s.sessions.get(sid)
        # A request names a session it did not make (an id taken already): it is its
        # sender's, not that session's.
        made = not isinstance(e, SessionRequested) or (v is not None and v.request_id == e.id)
        if v is not None and v.user is not None and made:
            found.add(v.domain)
    for field in _KEYS:
        key = getattr(e, field, None)
        if isinstance(key, str):
            domain = key_domain(t, key)
            if domain is not None:
                found.add(domain)
    endpoint = getattr(e, "endpoint_id", None)
    ep = s.serving.endpoints.get(endpoint) if isinstance(endpoint, str) else None
    if ep is not None:
        found.add(ep.domain)
    folder = getattr(e, "vfolder_id", None)
    if isinstance(folder, str) and folder in t.vfolders:
        found.add(t.vfolders[folder].domain)
    if isinstance(e, AdminRequested | AdminApplied):
        found |= _command_domains(t, e.command)
    if isinstance(e, AdminRefused | AdminApplied | AdminRequested):
        found |= _requester_domain(t, e.requester)
    return frozenset(found)


def _requester_domain(t: Tenancy, requester: str) -> set[str]:
    domain = key_domain(t, requester)
    return set() if domain is None else {domain}


def _command_domains(t: Tenancy, c: object) -> set[str]:
    """What an administrator's command acts in (a command that names nothing known: none)."""
    found: set[str] = set()
    domain = getattr(c, "domain", None)
    if isinstance(domain, str) and domain in t.domains:
        found.add(domain)
    user = getattr(c, "user", None)
    if isinstance(user, str) and user in t.users:
        found.add(t.users[user].domain)
    key = getattr(c, "access_key", None)
    if isinstance(key, str):
        found |= _requester_domain(t, key)
    folder = getattr(c, "vfolder_id", None)
    if isinstance(folder, str) and folder in t.vfolders:
        found.add(t.vfolders[folder].domain)
    service = getattr(c, "service", None)
    if isinstance(service, str) and service.startswith("reader:"):
        found.add(service.partition(":")[2])
    if isinstance(c, SetPolicy):
        found |= _policy_domains(t, c.level, c.target)
    return found


def _policy_domains(t: Tenancy, level: PolicyLevel, target: str) -> set[str]:
    if level is PolicyLevel.DOMAIN:
        return {target}
    if level is PolicyLevel.PROJECT:
        return {target.split("/", 1)[0]}
    if level is PolicyLevel.USER:
        return {t.users[target].domain} if target in t.users else set()
    return _requester_domain(t, target)
