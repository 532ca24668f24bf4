"""Resource groups: which agents serve which sessions, and under what settings.

An agent serves one group (``AgentRegistered.group``), a session asks for one
(``SessionRequested.group``; none: ``default``), and a session is only ever placed on an
agent of its group. A superadmin creates, updates and removes groups (``CreateGroup``,
``UpdateGroup``, ``RemoveGroup``, folded into the tenancy); each carries its queue order,
placement policy, pending timeout, lifetimes, idle timeout and the projects that may use
it (``GroupSettings``).

The ``default`` group always exists. Until an administrator gives it settings it runs
under the scheduler's own (``fgpu scheduler --policy --pending-timeout``), so a cluster
from before groups behaves as it did. A removed group's sessions go on under the
defaults. Pure functions only.
"""

from collections.abc import Mapping

from events import CreateGroup, GroupSettings, RemoveGroup, UpdateGroup
from events import subjects as subj
from events.slots import FGPU_QUANTUM_PER_UNIT
from services.domain.durations import LONGEST_S
from services.domain.resources import format_fgpu

__all__ = [
    "DEFAULT_GROUP",
    "POLICY_NAMES",
    "GroupCommand",
    "admission_problem",
    "fgpu_quantum_of",
    "invalid_group_command",
    "lifetime_of",
    "settings_of",
]

DEFAULT_GROUP = "default"
# The placement policies by name (``services.domain.scheduling.placement`` builds them); here so
# that the tenancy can check a group's policy without importing the policies.
POLICY_NAMES = ("best-fit", "pack", "spread", "round-robin", "fragmentation-aware")

GroupCommand = CreateGroup | UpdateGroup | RemoveGroup


def settings_of(
    groups: Mapping[str, GroupSettings], group: str, fallback: GroupSettings
) -> GroupSettings:
    """The settings ``group``'s sessions run under: its own, else ``fallback`` (the
    scheduler's, for the default group never given any, and for a removed group)."""
    return groups.get(group, fallback)


def lifetime_of(settings: GroupSettings, asked_s: int | None) -> int | None:
    """How long a session may run, in seconds: what it asked, else the group's default,
    else its maximum; None: for ever."""
    if asked_s is not None:
        return asked_s
    default = settings.default_lifetime_s
    return default if default is not None else settings.max_lifetime_s


def fgpu_quantum_of(groups: Mapping[str, GroupSettings], group: str) -> int:
    """The step of the fGPU a session of ``group`` may ask for, in quanta: its
    administrator's, else one quantum (0.01 fGPU)."""
    settings = groups.get(group)
    quantum = None if settings is None else settings.fgpu_quantum
    return 1 if quantum is None else quantum


def admission_problem(
    groups: Mapping[str, GroupSettings],
    group: str,
    project: str,
    lifetime_s: int | None,
    fgpu: int = 0,
) -> str | None:
    """Why a session of ``project`` (``domain/project``) may not ask for ``group`` with
    ``lifetime_s`` and ``fgpu`` quanta; None if it may. The default group takes every
    project unless given settings that say otherwise; an amount of fGPU must be a
    multiple of the group's quantum (finer is refused, never rounded).

    A group closed to the project is refused in the same words as one that does not
    exist: the reason reaches the requester, who must not learn of groups it cannot see
    (``visibility.sees_group``)."""
    settings = groups.get(group)
    closed = f"no resource group {group} open to project {project}"
    if settings is None:
        return closed if group != DEFAULT_GROUP else None
    if settings.projects is not None and project not in settings.projects:
        return closed
    most = settings.max_lifetime_s
    if lifetime_s is not None and most is not None and lifetime_s > most:
        return f"a lifetime of {lifetime_s} s is over resource group {group}'s maximum of {most} s"
    quantum = fgpu_quantum_of(groups, group)
    if fgpu % quantum:
        return (
            f"resource group {group} gives fGPU in steps of {format_fgpu(quantum)}; "
            f"asked {format_fgpu(fgpu)}"
        )
    return None


def invalid_group_command(
    groups: Mapping[str, GroupSettings],
    projects: Mapping[str, Mapping[str, None]],
    c: GroupCommand,
) -> tuple[bool, str] | None:
    """Why ``c`` cannot hold as written, as (conflict?, reason); None if it can.
    ``projects``: the tenancy's domains and their projects."""
    g = c.group
    if not subj.is_token(g):
        return False, f"group {g!r} must be 1-64 letters, digits, '-' or '_'"
    match c:
        case CreateGroup():
            if g in groups or g == DEFAULT_GROUP:
                return True, f"resource group {g} exists"
        case UpdateGroup():
            if g not in groups and g != DEFAULT_GROUP:
                return False, f"no resource group {g}"
            if c.expected is not None and groups.get(g) != c.expected:
                return True, f"resource group {g} changed since it was read"
        case RemoveGroup():
            if g == DEFAULT_GROUP:
                return False, "the default resource group cannot be removed"
            if g not in groups:
                return False, f"no resource group {g}"
            return None
    return _invalid_settings(c.settings, projects)


def _invalid_settings(
    s: GroupSettings, projects: Mapping[str, Mapping[str, None]]
) -> tuple[bool, str] | None:
    if s.policy not in POLICY_NAMES:
        return False, f"no placement policy {s.policy!r}; there are {', '.join(POLICY_NAMES)}"
    times = {
        "pending timeout": s.pending_timeout_s,
        "default lifetime": s.default_lifetime_s,
        "maximum lifetime": s.max_lifetime_s,
        "idle timeout": s.idle_timeout_s,
    }
    for name, value in times.items():
        if value is not None and value < 0:
            return False, f"the {name} must not be negative"
        if value is not None and value > LONGEST_S:
            return (
                False,
                f"the {name} must be at most {LONGEST_S} s (a century; none: leave it out)",
            )
    for name in ("default lifetime", "maximum lifetime", "idle timeout"):
        if times[name] == 0:
            return False, f"the {name} must be at least 1 s (none: leave it out)"
    most, default = s.max_lifetime_s, s.default_lifetime_s
    if most is not None and default is not None and default > most:
        return False, "the default lifetime must not be over the maximum"
    q = s.fgpu_quantum
    if q is not None and not 1 <= q <= FGPU_QUANTUM_PER_UNIT:
        return False, "the fGPU quantum must be 0.01 to 1 fGPU"
    for key in s.projects or ():
        domain, _, project = key.partition("/")
        if project not in projects.get(domain, {}):
            return False, f"no project {key} (projects are named domain/project)"
    return None
