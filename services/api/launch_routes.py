"""What a user may launch, and with what: ``/v1/presets`` and ``/v1/launch-options``.

Who may read: ``/v1/presets`` shows the presets of every domain and of the viewer's own
(a superadmin's: all). ``/v1/launch-options`` is the viewer's own launch, as a person
(a keypair of a user; 403 on a cluster with no tenancy): the images its domain may run
(and its aliases), its projects, the resource groups open to them with each one's fGPU
quantum and what is free on its alive agents now (capacity is everyone's to see, as in
``/v1/agents``), the presets offered to it, and what its keypair, user, projects and
domain still hold room for under their policies. Nothing here names another user's
session, and no scope is wider than the read API's elsewhere: the policies are those
``/v1/policies`` shows a user, the held amounts its own or its projects' and domain's
totals, as the quota actor counts them (the refusal of a launch would say the same).
"""

from collections.abc import Callable
from typing import Any

import duckdb
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from events import CreatePreset, PolicyLevel, ResourcePolicy, Slots
from projections import queries
from projections.store import applied_seq
from services.api import models, shapes
from services.api.guard import Who
from services.api.params import Ask
from services.domain.access.visibility import Viewer
from services.domain.resources import UNLIMITED, format_fgpu, sub
from services.domain.scheduling.images import image_refusal
from services.domain.tenancy.admin import project_key
from services.domain.tenancy.groups import DEFAULT_GROUP, fgpu_quantum_of
from services.domain.tenancy.model import Tenancy, User, presets_for

__all__ = ["LaunchOptions", "PresetInfo", "mount"]


class PresetInfo(BaseModel):
    """A resource preset: a name for amounts a launch may fill in."""

    name: str
    domain: str | None = Field(description="its domain; null: offered in every domain")
    group: str | None = Field(description="offered for this resource group only; null: any")
    slots: models.Amounts


class LaunchImage(BaseModel):
    ref: str = Field(description="what a request names: an image, name:tag, or an alias")
    runs: str = Field(description="the image it runs (an alias's target; else itself)")
    held: bool = Field(description="an alive agent of some group holds it now")


class LaunchGroup(BaseModel):
    group: str
    fgpu_quantum: str = Field(description="the step of the fGPU its sessions may ask for")
    projects: list[str] = Field(description="the viewer's projects it is open to")
    agents: int = Field(description="its alive agents")
    fgpu_per_gpu: str = Field(description="the most fGPU one of its devices is worth")
    largest_fgpu: str = Field(description="the largest free share on one device now")
    largest_cpu: str = Field(description="the most CPU free on one agent now")
    largest_mem: int = Field(description="the most memory free on one agent now (bytes)")


class LevelRoom(BaseModel):
    """One policy level over the viewer's launches: its limits, what is held under it,
    and what is left (null: no limit)."""

    level: str = Field(description="keypair, user, project or domain")
    target: str
    max_sessions: int | None
    sessions: int = Field(description="sessions held (admitted, not ended)")
    total: models.Amounts | None = Field(description="the limit on what is held in all")
    held: models.Amounts
    remaining: models.Amounts | None = Field(description="total less held (none below 0)")
    max_pending_sessions: int | None
    pending_sessions: int
    max_pending: models.Amounts | None
    pending: models.Amounts
    max_priority: int | None


class LaunchOptions(BaseModel):
    """What the viewer may launch now, and within what."""

    last_seq: int
    user: str
    domain: str
    default_project: str | None
    projects: list[str] = Field(description="the viewer's projects, by name")
    any_image: bool = Field(description="the domain has no allow-list: any image may run")
    images: list[LaunchImage]
    groups: list[LaunchGroup]
    presets: list[PresetInfo]
    policies: list[LevelRoom] = Field(
        description="keypair, user, domain, and each of the viewer's projects"
    )


def mount(app: FastAPI, query: Ask[Any], tenancy: Callable[[], Tenancy]) -> None:
    @app.get("/v1/presets", tags=["sessions"])
    async def list_presets(viewer: Who) -> list[PresetInfo]:
        """Resource presets: those of every domain and of the viewer's own (a superadmin:
        every domain's)."""
        t = tenancy()
        if viewer.scope.everything:
            return [_preset(t.presets[k]) for k in sorted(t.presets)]
        return [_preset(p) for p in presets_for(t, viewer.domain)]

    @app.get("/v1/launch-options", tags=["sessions"], responses={403: {"model": models.Problem}})
    async def launch_options(viewer: Who) -> LaunchOptions:
        """What the viewer may launch (``fgpu session create``, or the web UI's form):
        images, projects, resource groups with their quantum and what is free now,
        presets, and the room left under each of its policy levels."""
        t = tenancy()
        user = t.users.get(viewer.user or "")
        if user is None:
            raise HTTPException(403, "launching is a user's: sign in with a user's keypair")

        def work(con: duckdb.DuckDBPyConnection) -> LaunchOptions:
            agents = [a for a in queries.agent_rows(con) if not a["lost"]]
            return LaunchOptions(
                last_seq=applied_seq(con),
                user=user.user,
                domain=user.domain,
                default_project=user.default_project,
                projects=list(user.projects),
                any_image=t.images.get(user.domain) is None,
                images=_images(t, user.domain, agents),
                groups=_groups(t, user, agents),
                presets=[_preset(p) for p in presets_for(t, user.domain)],
                policies=_rooms(con, t, viewer, user),
            )

        found: LaunchOptions = await query(work)
        return found


def _preset(p: CreatePreset) -> PresetInfo:
    return PresetInfo(name=p.name, domain=p.domain, group=p.group, slots=_amounts(p.slots))


def _amounts(s: Slots) -> models.Amounts:
    return shapes.amounts(s.fgpu, s.cpu, s.mem)


def _images(t: Tenancy, domain: str, agents: list[dict[str, Any]]) -> list[LaunchImage]:
    """What a session of ``domain`` may name: the tags alive agents hold that it may run,
    the allow-list's own tags (an agent may pull them), and its aliases."""
    held = {tag.ref for name in shapes.images_from_agents(agents) for tag in name.tags}
    listed = {ref for ref in t.images.get(domain, ()) if ":" in ref.rsplit("/", 1)[-1]}
    found = {
        ref: LaunchImage(ref=ref, runs=ref, held=ref in held)
        for ref in sorted(held | listed)
        if image_refusal(t, domain, ref) is None
    }
    for alias, image in sorted(t.aliases.get(domain, {}).items()):
        if image_refusal(t, domain, image) is None:
            found[alias] = LaunchImage(ref=alias, runs=image, held=image in held)
    return list(found.values())


def _groups(t: Tenancy, user: User, agents: list[dict[str, Any]]) -> list[LaunchGroup]:
    """The groups open to one of ``user``'s projects, with what their agents have free."""
    mine = [project_key(user.domain, p) for p in user.projects]
    names = [DEFAULT_GROUP, *sorted(g for g in t.groups if g != DEFAULT_GROUP)]
    found = []
    for name in names:
        settings = t.groups.get(name)
        if settings is None and name != DEFAULT_GROUP:
            continue
        open_to = settings.projects if settings is not None else None
        projects = [p.partition("/")[2] for p in mine if open_to is None or p in open_to]
        if not projects:
            continue
        own = [a for a in agents if a["resource_group"] == name]
        gpus = [g for a in own for g in a["gpus"]]
        found.append(
            LaunchGroup(
                group=name,
                fgpu_quantum=format_fgpu(fgpu_quantum_of(t.groups, name)),
                projects=projects,
                agents=len(own),
                fgpu_per_gpu=format_fgpu(max((g["capacity"] for g in gpus), default=0)),
                largest_fgpu=format_fgpu(max((g["free"] for g in gpus), default=0)),
                largest_cpu=shapes.amounts(0, max((a["free_cpu"] for a in own), default=0), 0).cpu,
                largest_mem=max((a["free_mem"] for a in own), default=0),
            )
        )
    return found


def _rooms(
    con: duckdb.DuckDBPyConnection, t: Tenancy, viewer: Viewer, user: User
) -> list[LevelRoom]:
    """Each policy level over ``viewer``'s launches: its keypair, its user, each of its
    projects, its domain."""
    levels = [
        (PolicyLevel.KEYPAIR, viewer.access_key, "owner"),
        (PolicyLevel.USER, user.user, "user"),
        *((PolicyLevel.PROJECT, project_key(user.domain, p), "project") for p in user.projects),
        (PolicyLevel.DOMAIN, user.domain, "domain"),
    ]
    return [
        _room(level, target, t.policies.get((level, target)), queries.held_by(con, column, target))
        for level, target, column in levels
    ]


def _room(
    level: PolicyLevel, target: str, p: ResourcePolicy | None, held: dict[str, Any]
) -> LevelRoom:
    p = p or ResourcePolicy()
    now = Slots(cpu=held["cpu"], mem=held["mem"], fgpu=held["fgpu"])
    pending = Slots(cpu=held["pending_cpu"], mem=held["pending_mem"], fgpu=held["pending_fgpu"])
    return LevelRoom(
        level=level.value,
        target=target,
        max_sessions=p.max_sessions,
        sessions=held["sessions"],
        total=None if p.total_slots is None else _amounts(p.total_slots),
        held=_amounts(now),
        remaining=None if p.total_slots is None else _amounts(_left(p.total_slots, now)),
        max_pending_sessions=p.max_pending_sessions,
        pending_sessions=held["pending_sessions"],
        max_pending=None if p.max_pending_slots is None else _amounts(p.max_pending_slots),
        pending=_amounts(pending),
        max_priority=p.max_priority,
    )


def _left(limit: Slots, held: Slots) -> Slots:
    """``limit`` less ``held``, none below zero; an unlimited amount stays unlimited."""
    left = sub(limit, held)
    return Slots(
        cpu=UNLIMITED if limit.cpu >= UNLIMITED else max(left.cpu, 0),
        mem=UNLIMITED if limit.mem >= UNLIMITED else max(left.mem, 0),
        fgpu=UNLIMITED if limit.fgpu >= UNLIMITED else max(left.fgpu, 0),
    )
