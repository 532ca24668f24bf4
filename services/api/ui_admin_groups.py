"""The administrators' page's resource-group changes (``/ui/admin/groups...``): each the
administrator's own admin request, the one ``fgpu admin group create|update|rm`` sends, on
its own connection, in its name (``ui_admin.Registrar``).

The registrar lets a superadmin alone change a group (a group is the cluster's, not a
domain's); a domain admin's request is sent all the same and refused by the registrar
with its reason, as the CLI's is. The web server judges no role beyond turning a user away
(403, nothing sent).

An update changes the settings it is given and keeps the rest, as ``fgpu admin group
update`` does: the settings are read as the read API shows them to this administrator
(``GET /v1/groups``, ``tenancy_routes.groups_seen``: never what it may not see), the
given ones laid over them, and the change names what it was made from (``expected``). A
change someone else made meanwhile is not undone: the registrar refuses this one as a
conflict, the settings are read again (the projections already hold that change, which
came before the refusal) and the change made on top of them, a few times at most. A
conflict with the settings read unchanged is no one else's change and is answered as it
came.

Who may use each route (``tests/api/test_ui.py`` lists them, ``tests/api/test_ui_admin.py``
tries them): a browser session of a domain admin or a superadmin, with its CSRF token and
from this origin; a user's is refused (403), an anonymous one's (401).
- ``POST /ui/admin/groups``: create a group (``fgpu admin group create``);
- ``PATCH /ui/admin/groups/{group}``: change the settings given, keep the rest, take those
  in ``clear`` back to none (``fgpu admin group update``); 404 for a group this
  administrator does not see (nothing sent, as the CLI sends nothing);
- ``DELETE /ui/admin/groups/{group}``: remove a group (``fgpu admin group rm``).
"""

from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from events import CreateGroup, GroupSettings, RemoveGroup, UpdateGroup
from services.api.tenancy_routes import groups_seen
from services.api.ui_admin import AdminDone, Administrator, Registrar
from services.domain.access.visibility import Viewer
from services.domain.resources import InvalidAmount, parse_fgpu
from services.domain.tenancy.model import Tenancy

__all__ = ["GroupChange", "NewGroup", "mount"]

# Tries of an update whose group someone else changed meanwhile (each reads it again).
_UPDATE_ATTEMPTS = 5
_SECONDS = Field(default=None, ge=0, le=10 * 365 * 86400)
_PROJECT = Annotated[str, Field(min_length=1, max_length=130)]

Clearable = Literal[
    "pending_timeout_s",
    "default_lifetime_s",
    "max_lifetime_s",
    "idle_timeout_s",
    "projects",
    "fgpu_quantum",
]


class GroupFields(BaseModel):
    """A group's settings as ``fgpu admin group`` takes them; None: not given."""

    queue: Literal["fifo", "lifo", "drf"] | None = None
    policy: str | None = Field(default=None, min_length=1, max_length=64)
    pending_timeout_s: int | None = _SECONDS
    default_lifetime_s: int | None = _SECONDS
    max_lifetime_s: int | None = _SECONDS
    idle_timeout_s: int | None = _SECONDS
    projects: list[_PROJECT] | None = Field(
        default=None, max_length=256, description="DOMAIN/PROJECT each; none: every project"
    )
    fgpu_quantum: str | None = Field(
        default=None, max_length=32, description="the step of its sessions' fGPU, e.g. 0.1"
    )
    request_id: str | None = Field(default=None, max_length=64)


class NewGroup(GroupFields):
    """``fgpu admin group create``'s arguments."""

    group: str = Field(min_length=1, max_length=64)


class GroupChange(GroupFields):
    """``fgpu admin group update``'s: the settings given change, those in ``clear`` go
    back to none, the rest are kept."""

    clear: list[Clearable] = Field(default=[], max_length=6)


def mount(app: FastAPI, ask: Registrar, tenancy: Callable[[], Tenancy]) -> None:
    """The group changes on ``app``; ``tenancy``: the tenancy as folded now."""

    @app.post("/ui/admin/groups", include_in_schema=False)
    async def create_group(form: NewGroup, who: Administrator) -> AdminDone:
        """Create a resource group (what ``fgpu admin group create`` sends)."""
        command = CreateGroup(group=form.group, settings=_settings(_given(form)))
        return await ask(who, command, form.request_id)

    @app.patch("/ui/admin/groups/{group}", include_in_schema=False)
    async def update_group(group: str, form: GroupChange, who: Administrator) -> AdminDone:
        """Change a group's settings given, keep the rest (``fgpu admin group update``)."""
        given, rid = _given(form), form.request_id
        seen: dict[str, Any] | None = None
        for _ in range(_UPDATE_ATTEMPTS):
            before = _current(tenancy(), who[1], group)
            if seen is not None and before == seen:
                break  # read unchanged: the conflict is no one else's change
            done = await ask(who, _change(group, before, given, form), rid)
            if not _read_stale(done):
                return done
            seen, rid = before, None  # the next try is a request of its own
        return done

    @app.delete("/ui/admin/groups/{group}", include_in_schema=False)
    async def remove_group(group: str, who: Administrator) -> AdminDone:
        """Remove a group (what ``fgpu admin group rm`` sends)."""
        return await ask(who, RemoveGroup(group=group), None)


def _read_stale(done: AdminDone) -> bool:
    """Whether the registrar refused a change as made from settings since changed."""
    return done.code == "conflict" and "changed since it was read" in (done.reason or "")


def _given(form: GroupFields) -> dict[str, Any]:
    """The settings ``form`` names, as GroupSettings' fields; 422 for an fGPU step the CLI
    refuses too (finer than the cluster's quantum, or not an amount)."""
    given: dict[str, Any] = {
        "queue": form.queue,
        "policy": form.policy,
        "pending_timeout_s": form.pending_timeout_s,
        "default_lifetime_s": form.default_lifetime_s,
        "max_lifetime_s": form.max_lifetime_s,
        "idle_timeout_s": form.idle_timeout_s,
        "projects": tuple(form.projects) if form.projects else None,
    }
    if form.fgpu_quantum:
        try:
            given["fgpu_quantum"] = parse_fgpu(form.fgpu_quantum)
        except InvalidAmount as e:
            raise HTTPException(422, f"fgpu_quantum: {e}") from e
    return {k: v for k, v in given.items() if v is not None}


def _current(t: Tenancy, viewer: Viewer, group: str) -> dict[str, Any]:
    """``group``'s settings as the read API shows them to ``viewer`` (empty: the default
    group never given any); 404 if it sees no such group."""
    for g in groups_seen(t, viewer):
        if g.group != group:
            continue
        if not g.configured:
            return {}
        shown = g.model_dump(exclude={"group", "configured"}, exclude_none=True)
        if "projects" in shown:
            shown["projects"] = tuple(shown["projects"])
        if "fgpu_quantum" in shown:  # shown as fGPU, held in quanta
            shown["fgpu_quantum"] = parse_fgpu(shown["fgpu_quantum"])
        return shown
    raise HTTPException(404, f"no resource group {group}")


def _change(
    group: str, before: dict[str, Any], given: dict[str, Any], form: GroupChange
) -> UpdateGroup:
    """The update of ``group`` from ``before``: ``given`` laid over it, ``form.clear``
    taken away. 422 for the default group never given settings unless given a policy:
    it runs under the scheduler's own until then, which the log does not hold, so what is
    not given would not be kept but replaced (the CLI says the same)."""
    if not before and "policy" not in given:
        raise HTTPException(
            422,
            f"resource group {group} runs under the scheduler's settings until given its own: "
            "give them whole, a policy first (and a pending timeout if the scheduler has one)",
        )
    fields = {**before, **given}
    for name in form.clear:
        fields.pop(name, None)
    expected = _settings(before) if before else None
    return UpdateGroup(group=group, settings=_settings(fields), expected=expected)


def _settings(fields: dict[str, Any]) -> GroupSettings:
    try:
        return msgspec.convert(fields, GroupSettings)
    except msgspec.ValidationError as e:
        raise HTTPException(422, f"bad group settings: {e}") from e
