"""The web UI's administrators' writes (``/ui/admin/...``): each the administrator's own
admin request, the one ``fgpu admin ...`` sends, on the administrator's own connection to
the bus (``browser.Acting``), in its name.

The registrar judges the request as it judges the CLI's, by the requester's role: a
domain admin manages its own domain only, a superadmin every one. The web server decides
nothing of that: it only turns away, before sending anything, a browser session whose
user is no administrator (403), since no administrator's page is its. The answer waits, at
most ``DECIDED_WITHIN_S``, for the registrar's (as ``fgpu admin`` waits, shorter): applied,
or refused with the registrar's code and reason, which the page shows inline.

A new keypair's secret is made here, as the CLI makes it on the administrator's machine:
only its salted hash goes on the log; the secret is in this one answer (never stored, and
every UI answer is ``Cache-Control: no-store``), unless the registrar refused the keypair.

The pages' reads are the read API's own routes (``/v1/users``, ``/v1/keypairs``,
``/v1/policies``, ``/v1/groups``, ``/v1/image-policies``, ``/v1/presets``, ``/v1/agents``,
``/v1/sessions``), each showing an administrator what its scope covers, as to the CLI.

Who may use each route (``tests/api/test_ui.py`` lists them, ``tests/api/test_ui_admin.py``
tries them): a browser session of a domain admin or a superadmin, with its CSRF token and
from this origin; a user's is refused (403), an anonymous one's (401).
- ``POST /ui/admin/users``: create a user (``fgpu admin user create``);
- ``POST /ui/admin/keypairs``: make a person's keypair (``fgpu admin keypair create``);
- ``POST /ui/admin/keypairs/{access_key}/revoke`` (``fgpu admin keypair revoke``);
- ``POST /ui/admin/policies``: set one level's policy (``fgpu admin policy set``);
- ``POST /ui/admin/presets``, ``DELETE /ui/admin/presets/{name}``: define or remove a
  preset (``fgpu admin preset create``, ``rm``).
Resource groups' changes are ``ui_admin_groups.py``'s, image allow-lists' and aliases'
``ui_admin_images.py``'s; each asks through the same ``Registrar``.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import anyio
import duckdb
from fastapi import Depends, FastAPI, HTTPException, Query
from pydantic import BaseModel, Field

from events import (
    AdminCommand,
    CreateKeypair,
    CreatePreset,
    CreateUser,
    PolicyLevel,
    RemovePreset,
    ResourcePolicy,
    RevokeKeypair,
    Role,
    SetPolicy,
    Slots,
)
from projections import queries
from projections.store import applied_seq
from services.api.browser import BadRequestId, BrowserSession
from services.api.guard import Browser, Guard
from services.api.params import Ask
from services.api.ui_launch import DECIDED_WITHIN_S, acting_errors
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.access.visibility import Viewer
from services.domain.resources import UNLIMITED, InvalidAmount, parse_cpu, parse_fgpu, parse_mem

__all__ = [
    "AdminDone",
    "Administrator",
    "NewKeypair",
    "NewPolicy",
    "NewPreset",
    "NewUser",
    "Registrar",
    "mount",
    "registrar_answer",
]

_NAME = Field(min_length=1, max_length=64)
_AMOUNT = Field(default=None, max_length=32)
_RID = Field(default=None, max_length=64)


class NewUser(BaseModel):
    """``fgpu admin user create``'s arguments."""

    user: str = _NAME
    domain: str = _NAME
    role: Literal["user", "domain-admin", "superadmin"] = "user"
    projects: list[str] = Field(default=[], max_length=64)
    default_project: str | None = Field(default=None, max_length=64)
    request_id: str | None = _RID


class NewKeypair(BaseModel):
    """A person's keypair (``fgpu admin keypair create --user``)."""

    user: str = _NAME
    request_id: str | None = _RID


class NewPolicy(BaseModel):
    """``fgpu admin policy set``'s: one level's target and its limits, amounts as text
    (what is not given is not limited)."""

    level: Literal["keypair", "user", "project", "domain"]
    target: str = Field(min_length=1, max_length=130, description="a project: DOMAIN/PROJECT")
    max_sessions: int | None = Field(default=None, ge=0)
    max_pending_sessions: int | None = Field(default=None, ge=0)
    max_pending_fgpu: str | None = _AMOUNT
    max_fgpu: str | None = _AMOUNT
    max_cpu: str | None = _AMOUNT
    max_mem: str | None = _AMOUNT
    max_priority: int | None = Field(default=None, ge=0, le=100)
    request_id: str | None = _RID


class NewPreset(BaseModel):
    """``fgpu admin preset create``'s; ``domain`` None: of every domain (a superadmin's)."""

    name: str = _NAME
    cpu: str = Field(max_length=32)
    mem: str = Field(max_length=32)
    fgpu: str = Field(default="0", max_length=32)
    group: str | None = Field(default=None, max_length=64)
    domain: str | None = Field(default=None, max_length=64)
    request_id: str | None = _RID


class AdminDone(BaseModel):
    """An admin request on the log, and the registrar's answer if it came in time."""

    request_id: str
    decided: bool = Field(description="the registrar answered within the wait")
    applied: bool
    code: str | None = Field(description="forbidden, invalid or conflict; null: applied")
    reason: str | None = Field(description="the registrar's, as it gave it")
    access_key: str | None = None
    secret_key: str | None = Field(
        default=None, description="a new keypair's secret: in this answer only, once applied"
    )


async def _administrator(who: Browser) -> tuple[BrowserSession, Viewer]:
    """A browser session (``Browser``: CSRF and origin checked) of an administrator; a
    user's is refused (403) before its body is read and before anything is sent: no
    administrator's page is its."""
    if who[1].role is Role.USER:
        raise HTTPException(403, f"user {who[1].user} administers nothing: an administrator's")
    return who


# A browser session of a domain admin or a superadmin, for the administrators' writes.
Administrator = Annotated[tuple[BrowserSession, Viewer], Depends(_administrator)]


@dataclass(frozen=True)
class Registrar:
    """Asks the registrar in an administrator's name, on its own connection (``Acting``),
    and waits for the answer: what every ``/ui/admin/...`` write does."""

    query: Ask[Any]
    guard: Guard
    moved: Callable[[int], Awaitable[int]]

    async def __call__(
        self, who: tuple[BrowserSession, Viewer], command: AdminCommand, rid: str | None
    ) -> AdminDone:
        """``command`` asked as ``who``'s own admin request (``rid``: its id, None: a new
        one); the registrar's answer, or undecided after ``DECIDED_WITHIN_S``. Raises
        HTTPException: 422 for a bad request id, else as ``acting_errors``."""
        s, _ = who
        try:
            with acting_errors():
                acting = await self.guard.browsers.acting(s)
                request_id = await acting.admin(command, rid)
        except BadRequestId as e:
            raise HTTPException(422, str(e)) from e
        return await _answered(self.query, self.moved, request_id)


def mount(app: FastAPI, ask: Registrar) -> None:
    """The administrators' writes on ``app``, each asked of the registrar by ``ask``."""

    @app.post("/ui/admin/users", include_in_schema=False)
    async def create_user(form: NewUser, who: Administrator) -> AdminDone:
        """Create a user of a domain (what ``fgpu admin user create`` sends)."""
        command = CreateUser(
            user=form.user,
            domain=form.domain,
            role=Role(form.role),
            projects=tuple(p for p in form.projects if p),
            default_project=form.default_project or None,
        )
        return await ask(who, command, form.request_id)

    @app.post("/ui/admin/keypairs", include_in_schema=False)
    async def create_keypair(form: NewKeypair, who: Administrator) -> AdminDone:
        """Make a person's keypair: its secret in this answer, once (only its hash is
        sent)."""
        key, secret = new_access_key(), new_secret()
        command = CreateKeypair(access_key=key, user=form.user, secret_hash=hash_secret(secret))
        done = await ask(who, command, form.request_id)
        done.access_key = key
        done.secret_key = secret if done.applied or not done.decided else None
        return done

    @app.post("/ui/admin/keypairs/{access_key}/revoke", include_in_schema=False)
    async def revoke_keypair(access_key: str, who: Administrator) -> AdminDone:
        """Revoke a keypair (what ``fgpu admin keypair revoke`` sends)."""
        return await ask(who, RevokeKeypair(access_key=access_key), None)

    @app.post("/ui/admin/policies", include_in_schema=False)
    async def set_policy(form: NewPolicy, who: Administrator) -> AdminDone:
        """Set one level's policy (what ``fgpu admin policy set`` sends)."""
        command = SetPolicy(level=PolicyLevel(form.level), target=form.target, policy=_policy(form))
        return await ask(who, command, form.request_id)

    @app.post("/ui/admin/presets", include_in_schema=False)
    async def create_preset(form: NewPreset, who: Administrator) -> AdminDone:
        """Define a preset (what ``fgpu admin preset create`` sends)."""
        try:
            fgpu = parse_fgpu(form.fgpu, zero=True)
            slots = Slots(cpu=parse_cpu(form.cpu), mem=parse_mem(form.mem), fgpu=fgpu)
        except InvalidAmount as e:
            raise HTTPException(422, str(e)) from e
        command = CreatePreset(
            name=form.name, slots=slots, domain=form.domain or None, group=form.group or None
        )
        return await ask(who, command, form.request_id)

    @app.delete("/ui/admin/presets/{name}", include_in_schema=False)
    async def remove_preset(
        name: str, who: Administrator, domain: Annotated[str | None, Query(max_length=64)] = None
    ) -> AdminDone:
        """Remove a preset of ``domain`` (none: of every domain), as ``fgpu admin preset
        rm`` asks."""
        return await ask(who, RemovePreset(name=name, domain=domain or None), None)


def _policy(form: NewPolicy) -> ResourcePolicy:
    """The policy ``form`` sets, as ``fgpu admin policy set`` makes it; 422 for an amount
    the CLI refuses too."""
    try:
        totals = None
        if form.max_fgpu or form.max_cpu or form.max_mem:
            totals = Slots(
                fgpu=parse_fgpu(form.max_fgpu) if form.max_fgpu else UNLIMITED,
                cpu=parse_cpu(form.max_cpu) if form.max_cpu else UNLIMITED,
                mem=parse_mem(form.max_mem) if form.max_mem else UNLIMITED,
            )
        waiting = None
        if form.max_pending_fgpu:
            waiting = Slots(fgpu=parse_fgpu(form.max_pending_fgpu), cpu=UNLIMITED, mem=UNLIMITED)
    except InvalidAmount as e:
        raise HTTPException(422, str(e)) from e
    return ResourcePolicy(
        max_sessions=form.max_sessions,
        max_pending_sessions=form.max_pending_sessions,
        max_pending_slots=waiting,
        total_slots=totals,
        max_priority=form.max_priority,
    )


async def registrar_answer(
    query: Ask[Any], moved: Callable[[int], Awaitable[int]], request_id: str
) -> dict[str, Any] | None:
    """The registrar's answer to ``request_id`` (``queries.admin_answer_row``) once the
    projections hold it, or None after ``DECIDED_WITHIN_S``."""

    def read(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, Any] | None, int]:
        return queries.admin_answer_row(con, request_id), applied_seq(con)

    row: dict[str, Any] | None
    row, seq = await query(read)
    with anyio.move_on_after(DECIDED_WITHIN_S):
        while row is None:
            await moved(seq)
            row, seq = await query(read)
    return row


async def _answered(
    query: Ask[Any], moved: Callable[[int], Awaitable[int]], request_id: str
) -> AdminDone:
    """The registrar's answer to ``request_id``, or undecided after ``DECIDED_WITHIN_S``."""
    row = await registrar_answer(query, moved, request_id)
    if row is None:
        return AdminDone(
            request_id=request_id, decided=False, applied=False, code=None, reason=None
        )
    return AdminDone(
        request_id=request_id,
        decided=True,
        applied=row["applied"],
        code=row["code"],
        reason=row["reason"],
    )
