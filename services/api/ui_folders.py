"""The web UI's folders: creating and sharing one, as the user's own requests.

A folder is the tenancy's: it is made and shared by admin requests that the registrar
applies or refuses, as ``fgpu vfolder create`` and ``fgpu vfolder share`` ask for them.
These routes publish the same commands on the user's own connection to the bus
(``browser.Acting``), in the user's name, and wait a little (``DECIDED_WITHIN_S``) for
the registrar's answer, which comes back as the log gave it (applied, or refused with its
code and reason). The files themselves go through the storage service's own routes
(``vfolder_routes.py``: listing, chunked and resumable upload, download, remove, rename),
which take the browser session's cookie as a bearer token, each write with its CSRF token
(``guard.py``); the Folders page (``ui/folders.js``) calls them as the CLI does.

Who may use each route (``tests/api/test_ui.py``, ``tests/api/test_ui_folders.py``):
- ``POST /ui/vfolders``: a browser session, with its CSRF token; the folder is the user's
  own, or, for a project (``project``), one the registrar lets the user create (its
  domain's administrators);
- ``POST /ui/vfolders/{id}/share``: a browser session whose viewer sees that folder as
  ``/v1/vfolders`` shows it (else 404, as the storage routes answer), with its CSRF
  token; the registrar then judges it as the CLI's (only who manages the folder shares).
"""

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from events import AdminCommand, CreateVfolder, ShareVfolder
from events import subjects as subj
from services.api.browser import BrowserSession
from services.api.guard import Browser, Guard
from services.api.params import NOT_FOUND, Ask, form_request_id
from services.api.ui_admin import registrar_answer
from services.api.ui_launch import acting_errors
from services.api.vfolder_routes import seen_folder
from services.domain.access.visibility import Viewer
from services.domain.resources import InvalidAmount, parse_mem
from services.domain.tenancy.model import Tenancy

__all__ = ["FolderAsked", "FolderForm", "ShareForm", "mount"]


class FolderForm(BaseModel):
    """A new folder, as ``fgpu vfolder create`` takes it: its quota as text (``10g``)."""

    name: str = Field(max_length=64)
    quota: str | None = Field(default=None, max_length=32)
    project: str | None = Field(default=None, max_length=130, description="DOMAIN/PROJECT")
    request_id: str | None = Field(default=None, max_length=64)


class ShareForm(BaseModel):
    """A share, as ``fgpu vfolder share`` takes it: a user, or a project's members."""

    user: str | None = Field(default=None, max_length=64)
    project: str | None = Field(default=None, max_length=130, description="DOMAIN/PROJECT")
    access: Literal["ro", "rw"] = "ro"
    request_id: str | None = Field(default=None, max_length=64)


class FolderAsked(BaseModel):
    """An admin request on the log, and the registrar's answer if it came in time."""

    request_id: str
    vfolder_id: str
    decided: bool = Field(description="the registrar answered within the wait")
    applied: bool
    code: str | None = Field(description="forbidden, invalid or conflict, as the log gave it")
    refused: str | None = Field(description="the refusal's reason, as the log gave it")


def mount(
    app: FastAPI,
    query: Ask[Any],
    guard: Guard,
    moved: Callable[[int], Awaitable[int]],
    tenancy: Callable[[], Tenancy],
) -> None:
    """The folder routes on ``app``; ``moved(seq)`` returns once the projections are past
    ``seq``."""

    async def asked(s: BrowserSession, command: AdminCommand, rid: str, vid: str) -> FolderAsked:
        with acting_errors():
            acting = await guard.browsers.acting(s)
            request_id = await acting.admin(command, rid)
        return await _answered(query, moved, request_id, vid)

    @app.post("/ui/vfolders", include_in_schema=False)
    async def create(form: FolderForm, who: Browser) -> FolderAsked:
        """Ask for a new folder, as the user's own request (what ``fgpu vfolder create``
        sends), and wait a little for the registrar's answer."""
        s, viewer = who
        rid = form_request_id(form.request_id)
        vid = _folder_id(s.access_key, rid)
        return await asked(s, _creation(form, viewer, vid), rid, vid)

    @app.post("/ui/vfolders/{vfolder_id}/share", include_in_schema=False, responses=NOT_FOUND)
    async def share(vfolder_id: str, form: ShareForm, who: Browser) -> FolderAsked:
        """Share a folder the viewer sees, as the user's own request (what ``fgpu vfolder
        share`` sends); the registrar decides whether the user may."""
        s, viewer = who
        f = seen_folder(tenancy(), viewer, vfolder_id)  # else 404
        command = ShareVfolder(vfolder_id=f.vfolder_id, target=_target(form), access=form.access)
        return await asked(s, command, form_request_id(form.request_id), f.vfolder_id)


def _folder_id(access_key: str, request_id: str) -> str:
    """The new folder's id, the same for the same request asked again (a retry of the
    form is one request, with one folder)."""
    return "vf-" + hashlib.sha256(f"{access_key}/{request_id}".encode()).hexdigest()[:16]


def _creation(form: FolderForm, viewer: Viewer, vfolder_id: str) -> CreateVfolder:
    """The command ``form`` asks for; 422 for what the CLI refuses before sending."""
    try:
        quota = parse_mem(form.quota) if form.quota else None
    except InvalidAmount as e:
        raise HTTPException(422, f"quota: {e}") from e
    if form.project:
        return CreateVfolder(
            vfolder_id=vfolder_id, name=form.name, quota_bytes=quota, project=_project(form.project)
        )
    if viewer.user is None:
        raise HTTPException(403, "virtual folders are users': sign in with a user's keypair")
    return CreateVfolder(vfolder_id=vfolder_id, name=form.name, quota_bytes=quota, user=viewer.user)


def _project(given: str) -> str:
    domain, _, project = given.partition("/")
    if not (subj.is_token(domain) and subj.is_token(project)):
        raise HTTPException(422, f"project {given!r}: DOMAIN/PROJECT")
    return given


def _target(form: ShareForm) -> str:
    """Whom ``form`` shares with, as the log names it (``user:NAME``, ``project:D/P``)."""
    if (form.user is None) == (form.project is None):
        raise HTTPException(422, "share with a user or a project: one of them")
    if form.user is not None:
        if not subj.is_token(form.user):
            raise HTTPException(422, f"user {form.user!r}: 1-64 letters, digits, '-' or '_'")
        return f"user:{form.user}"
    return f"project:{_project(str(form.project))}"


async def _answered(
    query: Ask[Any], moved: Callable[[int], Awaitable[int]], request_id: str, vfolder_id: str
) -> FolderAsked:
    """The registrar's answer to ``request_id``, or none after ``DECIDED_WITHIN_S``."""
    row = await registrar_answer(query, moved, request_id)
    applied = row is not None and bool(row["applied"])
    return FolderAsked(
        request_id=request_id,
        vfolder_id=vfolder_id,
        decided=row is not None,
        applied=applied,
        code=None if row is None else row["code"],
        refused=None if row is None or applied else row["reason"],
    )
