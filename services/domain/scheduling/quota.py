"""Quota decisions: may a request be admitted, given what its keypair, user, project and
domain hold and the policy of each?

A session holds its slots, at every level, from admission until it ends, whether it is
still PENDING or RUNNING, so what is admitted never exceeds a policy; it counts as pending
on its keypair from admission until it is placed. A policy acts on admission only: one
lowered below what is held ends nothing, it refuses what comes next.
"""

from events import PolicyLevel, ResourcePolicy
from services.domain.fold.cluster import ClusterState
from services.domain.records import OwnerUsage, SessionView
from services.domain.resources import add, fits, format_slots
from services.domain.tenancy.admin import project_key
from services.domain.tenancy.model import Tenancy
from services.domain.tenancy.vfolders import mount_plan

__all__ = ["admission_refusal", "keypair_policy", "mounted_hosts"]


def keypair_policy(s: ClusterState, access_key: str) -> ResourcePolicy | None:
    """The keypair's policy: set through tenancy, else a policy from before it."""
    policy = s.tenancy.policies.get((PolicyLevel.KEYPAIR, access_key))
    if policy is not None:
        return policy
    old = s.policies.get(access_key)
    if old is None:
        return None
    return ResourcePolicy(max_sessions=old.max_concurrent_sessions, total_slots=old.max_slots)


def admission_refusal(s: ClusterState, v: SessionView) -> str | None:
    """Why ``v`` may not be admitted now, naming the level and the limit; None if it may."""
    t = s.tenancy
    if t.on:
        refused = _not_a_tenant(t, v)
        if refused is not None:
            return refused
    none = OwnerUsage()
    levels: list[tuple[str, ResourcePolicy | None, OwnerUsage]] = [
        ("keypair policy", keypair_policy(s, v.owner), s.usage.get(v.owner, none)),
    ]
    if v.user is not None:
        levels.append(
            (
                f"user policy ({v.user})",
                t.policies.get((PolicyLevel.USER, v.user)),
                s.held.get(f"user:{v.user}", none),
            )
        )
    levels += [
        (
            f"project policy ({v.project})",
            t.policies.get((PolicyLevel.PROJECT, v.project)),
            s.held.get(f"project:{v.project}", none),
        ),
        (
            f"domain policy ({v.domain})",
            t.policies.get((PolicyLevel.DOMAIN, v.domain)),
            s.held.get(f"domain:{v.domain}", none),
        ),
    ]
    pending = s.pending.get(v.owner, none)
    for name, policy, held in levels:
        if policy is None:
            continue
        why = _over(policy, held, pending if name == "keypair policy" else None, v)
        if why is not None:
            return f"{name} {why}"
    return None


def mounted_hosts(t: Tenancy, v: SessionView) -> tuple[str, ...] | str:
    """The storage hosts of the virtual folders ``v`` asks to mount, sorted (none if it
    asks for none); or why it may not mount them."""
    plan = mount_plan(t, v.owner, v.mounts)
    return plan if isinstance(plan, str) else tuple(sorted({p.vfolder.host for p in plan}))


def _not_a_tenant(t: Tenancy, v: SessionView) -> str | None:
    """Why the owner of ``v`` may not ask for sessions in its project, if it may not."""
    kp = t.keypairs.get(v.owner)
    if kp is None or kp.revoked:
        return f"access key {v.owner} is unknown or revoked"
    user = t.user_of(v.owner)
    if user is None:
        return f"access key {v.owner} is not a user's: services run no sessions"
    domain, _, project = v.project.partition("/")
    if domain != user.domain or project not in user.projects:
        return f"user {user.user} is not a member of project {v.project}"
    if project not in t.domains.get(domain, {}):
        return f"there is no project {project_key(domain, project)}"
    return None


def _over(
    p: ResourcePolicy, held: OwnerUsage, pending: OwnerUsage | None, v: SessionView
) -> str | None:
    """Which limit of ``p`` admitting ``v`` would break, in words; None if none."""
    if p.max_priority is not None and v.priority > p.max_priority:
        return f"allows priority up to {p.max_priority}; asked {v.priority}"
    if p.max_sessions is not None and held.sessions + 1 > p.max_sessions:
        return f"allows {p.max_sessions} concurrent sessions; {held.sessions} already held"
    if p.total_slots is not None and not fits(add(held.slots, v.slots), p.total_slots):
        return f"allows {format_slots(p.total_slots)} in total; held: {format_slots(held.slots)}"
    if pending is not None:
        n = p.max_pending_sessions
        if n is not None and pending.sessions + 1 > n:
            return f"allows {n} pending sessions; {pending.sessions} already pending"
        most = p.max_pending_slots
        if most is not None and not fits(add(pending.slots, v.slots), most):
            return f"allows {format_slots(most)} pending; pending: {format_slots(pending.slots)}"
    return None
