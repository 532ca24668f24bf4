"""What a session holds while it lives: quota at every level of its tenancy, and its
allocation on its agent's devices. The session handlers of the fold
(``services.domain.fold.sessions``) take and give these back.
"""

from services.domain.fold.cluster import ClusterState
from services.domain.records import AgentView, OwnerUsage, SessionView
from services.domain.resources import add, sub
from services.domain.status import SessionStatus

__all__ = ["allocate", "count", "free", "hold_quota", "release_quota", "take_back", "unpend"]

S = SessionStatus


def _levels(s: ClusterState, v: SessionView) -> list[OwnerUsage]:
    """What ``v`` holds quota against: its owner's, and its user's, project's, domain's."""
    out = [s.usage.setdefault(v.owner, OwnerUsage())]
    if v.user is not None:
        out.append(s.held.setdefault(f"user:{v.user}", OwnerUsage()))
    out.append(s.held.setdefault(f"project:{v.project}", OwnerUsage()))
    out.append(s.held.setdefault(f"domain:{v.domain}", OwnerUsage()))
    return out


def count(u: OwnerUsage, v: SessionView, sign: int) -> None:
    u.sessions += sign
    u.slots = add(u.slots, v.slots) if sign > 0 else sub(u.slots, v.slots)


def hold_quota(s: ClusterState, v: SessionView) -> None:
    """Admitted: ``v`` holds its slots at every level until it ends, and is pending (on
    its owner's account) until it is placed."""
    for u in _levels(s, v):
        count(u, v, +1)
    count(s.pending.setdefault(v.owner, OwnerUsage()), v, +1)
    v.quota_held = True


def unpend(s: ClusterState, v: SessionView) -> None:
    if v.quota_held and v.status is S.PENDING:
        count(s.pending[v.owner], v, -1)


def release_quota(s: ClusterState, v: SessionView) -> None:
    if not v.quota_held:
        return
    unpend(s, v)
    for u in _levels(s, v):
        count(u, v, -1)
    v.quota_held = False


def allocate(s: ClusterState, a: AgentView, v: SessionView) -> None:
    a.allocated = add(a.allocated, v.slots)
    a.sessions[v.session_id] = None
    s.shares.allocated(a.group, v)
    for d in v.devices:
        g = a.gpus.get(d.gpu_index)
        if g is not None:
            g.give(v.session_id, d.fgpu)
    s.fit.update(a)


def free(s: ClusterState, v: SessionView) -> None:
    """Give back the session's allocation and quota; it holds neither afterwards."""
    release_quota(s, v)
    take_back(s, v)


def take_back(s: ClusterState, v: SessionView) -> None:
    """Give back the session's allocation on its agent (its quota stays held)."""
    a = s.agents.get(v.agent_id or "")
    if a is None or v.session_id not in a.sessions:
        return
    del a.sessions[v.session_id]
    a.allocated = sub(a.allocated, v.slots)
    s.shares.taken_back(a.group, v)
    for g in a.gpus.values():
        g.take_back(v.session_id)
    s.fit.update(a)
