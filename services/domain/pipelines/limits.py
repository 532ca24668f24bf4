"""Whether a pipeline's tasks could ever run for its user: each task's request as the
quota actor would read it, against the user's policies, the resource groups' rules and
the largest agent of each group. Problems, one line each; the admission of each session,
when its turn comes, stays the quota actor's (rights may change while a run goes on)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from events import GroupSettings, PipelineSpec, PipelineTask, PolicyLevel, ResourcePolicy, Slots
from services.domain.fold.cluster import ClusterState
from services.domain.fold.validation import invalid_request
from services.domain.pipelines.requests import draft_request
from services.domain.resources import fits, format_slots
from services.domain.scheduling.quota import keypair_policy
from services.domain.tenancy.admin import DEFAULT, project_key
from services.domain.tenancy.groups import DEFAULT_GROUP, admission_problem

__all__ = ["Limits", "groups_seen", "limits_of", "spec_problems"]


@dataclass(frozen=True)
class Limits:
    """What a user's tasks are checked against: its project (``domain/project``), each
    level's policy by name, the groups' settings, and the capacity of each live agent of
    each group that has some (a group absent here: not checked, agents may come)."""

    project: str
    policies: Sequence[tuple[str, ResourcePolicy | None]] = ()
    groups: Mapping[str, GroupSettings] = field(default_factory=dict)
    agents: Mapping[str, Sequence[Slots]] = field(default_factory=dict)


def spec_problems(spec: PipelineSpec, owner: str, limits: Limits | None) -> list[str]:
    """Every problem of ``spec``'s tasks for ``owner``: what the quota actor would refuse
    of any of them as written, then (with ``limits``) what the user's rights refuse."""
    problems = []
    for t in spec.tasks:
        # A serve task's replicas are judged by the serving actor as any endpoint's.
        why = None if t.serve is not None else invalid_request(draft_request(spec, t, owner))
        if why is not None:
            problems.append(f"tasks.{t.name}: {why}")
        elif limits is not None:
            problems += _over_limits(t, limits)
    return problems


def _over_limits(t: PipelineTask, limits: Limits) -> list[str]:
    where = f"tasks.{t.name}"
    group = t.group or DEFAULT_GROUP
    found = []
    why = admission_problem(limits.groups, group, limits.project, t.timeout_s, t.slots.fgpu)
    if why is not None:
        found.append(f"{where}: {why}")
    for name, policy in limits.policies:
        if policy is None:
            continue
        if policy.max_sessions == 0:
            found.append(f"{where}: the {name} allows no session")
        if policy.total_slots is not None and not fits(t.slots, policy.total_slots):
            most = format_slots(policy.total_slots)
            found.append(f"{where}.resources: over the {name}, which allows {most} in total")
    agents = limits.agents.get(group)
    if agents and not any(fits(t.slots, a) for a in agents):
        found.append(
            f"{where}.resources: none of the {len(agents)} agents of resource group "
            f"{group} holds {format_slots(t.slots)}"
        )
    return found


def limits_of(s: ClusterState, owner: str, project: str | None) -> Limits:
    """``owner``'s limits as ``s`` knows them, for its ``project`` (None: its default)."""
    t = s.tenancy
    user = t.user_of(owner)
    if user is None:
        chosen = "default/default"
        levels: list[tuple[str, ResourcePolicy | None]] = []
    else:
        chosen = project_key(user.domain, project or user.default_project or DEFAULT)
        levels = [
            (f"user policy ({user.user})", t.policies.get((PolicyLevel.USER, user.user))),
            (f"domain policy ({user.domain})", t.policies.get((PolicyLevel.DOMAIN, user.domain))),
        ]
    levels.insert(0, ("keypair policy", keypair_policy(s, owner)))
    levels.append((f"project policy ({chosen})", t.policies.get((PolicyLevel.PROJECT, chosen))))
    groups = groups_seen(t.groups, chosen)
    agents: dict[str, list[Slots]] = {}
    for a in s.agents.values():
        # Agents of the groups open to the project only, as the quota actor judges it.
        if not a.lost and admission_problem(groups, a.group, chosen, None) is None:
            agents.setdefault(a.group, []).append(a.capacity)
    return Limits(chosen, levels, groups, agents)


def groups_seen(groups: Mapping[str, GroupSettings], project: str) -> dict[str, GroupSettings]:
    """The groups as ``project`` may know them (``visibility.sees_group``): a group closed
    to it is left out (judged as one that does not exist, in the same words), and one
    open to a list of projects shows only this one. The default group stays, closed to
    every project where it is closed to this one (absent, it would read as open)."""
    seen: dict[str, GroupSettings] = {}
    for name, g in groups.items():
        if g.projects is None:
            seen[name] = g
        elif project in g.projects:
            seen[name] = msgspec.structs.replace(g, projects=(project,))
        elif name == DEFAULT_GROUP:
            seen[name] = msgspec.structs.replace(g, projects=())
    return seen
