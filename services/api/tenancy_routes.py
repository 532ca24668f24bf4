"""The tenancy as the read API shows it: to each viewer what its scope covers.

A superadmin sees every domain, user, keypair and policy; a domain admin those of its
domain; a user its domain's name, itself, its keypairs and the policies that apply to it.
An admin request's answer is shown to whoever could see the requester's keypair.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import duckdb
from fastapi import FastAPI, HTTPException

from projections import queries
from services.api import models, shapes
from services.api.guard import Who
from services.domain.access.visibility import Viewer, sees_group, sees_policy, sees_user
from services.domain.resources import format_fgpu
from services.domain.tenancy.groups import DEFAULT_GROUP
from services.domain.tenancy.model import Tenancy

__all__ = ["groups_seen", "mount"]

T = TypeVar("T")
Query = Callable[[Callable[[duckdb.DuckDBPyConnection], T]], Awaitable[T]]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": models.Problem}}


def mount(app: FastAPI, query: Query[Any], tenancy: Callable[[], Tenancy]) -> None:
    @app.get("/v1/admin/requests/{request_id}", tags=["tenancy"], responses=_NOT_FOUND)
    async def admin_answer(request_id: str, viewer: Who) -> models.AdminAnswer:
        """The registrar's answer to an admin request (its event id), or the serving
        actor's to a serve request: applied, or refused and why. 404 while it has no
        answer (or it is not the viewer's to see)."""
        row = await query(lambda con: queries.admin_answer_row(con, request_id))
        if row is None or not viewer.scope.sees_key(row["requester"]):
            raise HTTPException(404, f"admin request {request_id!r} has no answer (yet)")
        return models.AdminAnswer(**row)

    @app.get("/v1/domains", tags=["tenancy"])
    async def list_domains(viewer: Who) -> list[models.DomainInfo]:
        """Domains and their projects: all of them for a superadmin, else one's own."""
        rows = await query(lambda c: queries.tenancy_rows(c, "domains"))
        if not viewer.scope.everything:
            rows = [r for r in rows if r["domain"] == viewer.domain]
        return shapes.domains_from_rows(rows)

    @app.get("/v1/users", tags=["tenancy"])
    async def list_users(viewer: Who) -> list[models.UserInfo]:
        """Users, their domain, role and projects."""
        rows = await query(lambda con: queries.tenancy_rows(con, "users"))
        t = tenancy()
        return [models.UserInfo(**r) for r in rows if sees_user(t, viewer, r["user"])]

    @app.get("/v1/groups", tags=["tenancy"])
    async def list_groups(viewer: Who) -> list[models.GroupInfo]:
        """Resource groups a viewer may see: every one for a superadmin, else those open
        to a project of its domain (a domain admin) or to one of its projects (a user),
        with only its domain's projects named."""
        return groups_seen(tenancy(), viewer)

    @app.get("/v1/keypairs", tags=["tenancy"])
    async def list_keypairs(viewer: Who) -> list[models.KeypairInfo]:
        """Keypairs (never a secret), whose they are, and whether revoked."""
        rows = await query(lambda con: queries.tenancy_rows(con, "keypairs"))
        t = tenancy()
        return [models.KeypairInfo(**r) for r in rows if sees_user(t, viewer, r["user"])]

    @app.get("/v1/policies", tags=["tenancy"])
    async def list_policies(viewer: Who) -> list[models.PolicyInfo]:
        """Resource policies of keypairs, users, projects and domains."""
        rows = await query(lambda con: queries.tenancy_rows(con, "level_policies"))
        t = tenancy()
        return [
            shapes.policy_from_row(r)
            for r in rows
            if sees_policy(t, viewer, r["level"], r["target"])
        ]


def groups_seen(t: Tenancy, viewer: Viewer) -> list[models.GroupInfo]:
    """The resource groups of ``t`` as ``viewer`` may see them (``GET /v1/groups``): what
    the UI's group changes start from, as ``fgpu admin group update`` starts from that
    list."""
    found = [
        models.GroupInfo(
            group=name,
            configured=True,
            queue=g.queue.value,
            policy=g.policy,
            pending_timeout_s=g.pending_timeout_s,
            default_lifetime_s=g.default_lifetime_s,
            max_lifetime_s=g.max_lifetime_s,
            idle_timeout_s=g.idle_timeout_s,
            projects=None if g.projects is None else _projects_seen(viewer, g.projects),
            fgpu_quantum=None if g.fgpu_quantum is None else format_fgpu(g.fgpu_quantum),
        )
        for name, g in sorted(t.groups.items())
        if sees_group(t, viewer, g.projects)
    ]
    if DEFAULT_GROUP not in t.groups:
        found.insert(0, _unconfigured_default())
    return found


def _projects_seen(viewer: Viewer, projects: tuple[str, ...]) -> list[str]:
    """Of the projects (``domain/project``) a group is open to, those of the viewer's
    domain (every one for a superadmin): another domain's are not the viewer's to know."""
    if viewer.scope.everything:
        return list(projects)
    return [p for p in projects if p.partition("/")[0] == viewer.domain]


def _unconfigured_default() -> models.GroupInfo:
    """The default group before an administrator gave it settings: the scheduler's."""
    return models.GroupInfo(
        group=DEFAULT_GROUP,
        configured=False,
        queue="fifo",
        policy=None,
        pending_timeout_s=None,
        default_lifetime_s=None,
        max_lifetime_s=None,
        idle_timeout_s=None,
        projects=None,
    )
