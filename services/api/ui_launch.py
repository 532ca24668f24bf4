"""The web UI's launch: ``POST /ui/sessions``, the user's own session request.

The form's choices (``/v1/launch-options`` lists them) become the requests ``fgpu session
create`` would send, published on the user's own connection to the bus (``browser.Acting``)
in the user's name; the log judges them as it judges the CLI's. The answer waits, at most
``DECIDED_WITHIN_S``, until each session is admitted or refused (as ``fgpu session create
--wait`` waits, shorter): a refusal comes back with the reason the log gave, which names
the policy level and its limit (``quota policy (...) allows ...``), a closed resource
group or a project the user is not a member of.

Who may use it: a browser session (its CSRF token and this origin, ``guard.py``); the user
launches as itself only, in its own projects, as the log decides.
"""

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import anyio
import duckdb
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from events import SessionType, Slots, VfolderMount
from events import subjects as subj
from projections import queries
from projections.store import applied_seq
from services.api import models, shapes
from services.api.browser import BadLaunch, Launch, NoActing
from services.api.guard import Browser, Guard
from services.api.params import Ask
from services.domain.access.visibility import Scope
from services.domain.resources import InvalidAmount, parse_cpu, parse_fgpu, parse_mem
from services.ports import LogError, OutcomeUnknown, RequestsRefused

__all__ = ["DECIDED_WITHIN_S", "LaunchForm", "Launched", "mount"]

DECIDED_WITHIN_S = 15.0  # how long the answer waits for the log to judge the requests
MAX_COUNT = 100
MAX_NAME = 128  # as the quota actor allows


class LaunchForm(BaseModel):
    """The launch form, as ``fgpu session create`` takes it: amounts as text (``0.5``
    fGPU, ``2`` or ``500m`` CPU, ``4g`` memory); fGPU ``0``: no GPU."""

    image: str = Field(max_length=512)
    fgpu: str = Field(max_length=32)
    cpu: str = Field(max_length=32)
    mem: str = Field(max_length=32)
    project: str | None = Field(default=None, max_length=64)
    group: str | None = Field(default=None, max_length=64)
    session_type: Literal["interactive", "batch"] = "interactive"
    command: list[str] = Field(default=[], max_length=256)
    mounts: list[str] = Field(default=[], max_length=32, description="NAME, or NAME:ro")
    count: int = Field(default=1, ge=1, le=MAX_COUNT)
    name: str | None = Field(default=None, max_length=MAX_NAME)
    request_id: str | None = Field(default=None, max_length=64)


class Launched(BaseModel):
    """The requests on the log, and how the log judged them so far."""

    request_id: str | None
    sessions: list[models.Session] = Field(description="as /v1/sessions shows them")
    decided: bool = Field(description="each one admitted or refused within the wait")
    refused: str | None = Field(description="the first refusal's reason, as the log gave it")


@contextmanager
def acting_errors() -> Iterator[None]:
    """What acting as the user can meet, as the answers the CLI's errors map to: no
    connection for the user (503), refused by the intake (429), the outcome unknown
    (504), the bus not taking it (502)."""
    try:
        yield
    except NoActing as e:
        raise HTTPException(503, str(e)) from e
    except RequestsRefused as e:
        raise HTTPException(429, f"refused: {e}") from e
    except OutcomeUnknown as e:
        raise HTTPException(504, f"outcome unknown ({e}): ask again") from e
    except LogError as e:
        raise HTTPException(502, f"the bus did not take it: {e}") from e


def mount(
    app: FastAPI, query: Ask[Any], guard: Guard, moved: Callable[[int], Awaitable[int]]
) -> None:
    """``POST /ui/sessions`` on ``app``; ``moved(seq)`` returns once the projections are
    past ``seq``."""

    @app.post("/ui/sessions", include_in_schema=False)
    async def launch(form: LaunchForm, who: Browser) -> Launched:
        """Ask for sessions, as the user's own request (what ``fgpu session create``
        sends), and wait a little for the log's judgement."""
        s, viewer = who
        ask = _launch(form)
        try:
            with acting_errors():
                acting = await guard.browsers.acting(s)
                ids = await acting.create(ask)
        except BadLaunch as e:
            raise HTTPException(422, str(e)) from e
        rows = await _judged(query, moved, ids, viewer.scope)
        sessions = [shapes.session_from_row(r) for r in rows]
        refusals = [x.reason for x in sessions if x.status == "REJECTED"]
        return Launched(
            request_id=ask.request_id,
            sessions=sessions,
            decided=len(rows) == len(ids) and all(_decided(r) for r in rows),
            refused=refusals[0] if refusals else None,
        )


def _launch(form: LaunchForm) -> Launch:
    """The launch ``form`` asks for; 422 for what the CLI refuses before sending."""
    try:
        fgpu = parse_fgpu(form.fgpu, zero=True)
        slots = Slots(cpu=parse_cpu(form.cpu), mem=parse_mem(form.mem), fgpu=fgpu)
    except InvalidAmount as e:
        raise HTTPException(422, str(e)) from e
    for given, what in ((form.project, "project"), (form.group, "resource group")):
        if given is not None and not subj.is_token(given):
            raise HTTPException(422, f"{what} {given!r}: 1-64 letters, digits, '-' or '_'")
    kind = SessionType(form.session_type)
    command = tuple(form.command)
    if any(not arg for arg in command):
        raise HTTPException(422, "the command has an empty element")
    if kind is SessionType.BATCH and not command:
        raise HTTPException(422, "a batch session runs a command: give one")
    mounts = []
    for m in form.mounts:
        name, _, mode = m.partition(":")
        if not name or mode not in ("", "ro", "rw"):
            raise HTTPException(422, f"mount {m!r}: a folder's name, then :ro if read-only")
        mounts.append(VfolderMount(name=name, read_only=mode == "ro"))
    return Launch(
        image=form.image.strip(),
        slots=slots,
        count=form.count,
        request_id=form.request_id,
        command=command,
        name=form.name or None,
        project=form.project or None,
        group=form.group or None,
        cpu_only=fgpu == 0,
        session_type=kind,
        mounts=tuple(mounts),
    )


def _decided(row: dict[str, Any]) -> bool:
    return bool(row["status"] != "REQUESTED")


async def _judged(
    query: Ask[Any], moved: Callable[[int], Awaitable[int]], ids: list[str], scope: Scope
) -> list[dict[str, Any]]:
    """The rows of sessions ``ids`` once the log judged each (admitted or refused), or
    as they are after ``DECIDED_WITHIN_S``; in the order of ``ids``."""

    def read(con: duckdb.DuckDBPyConnection) -> tuple[list[dict[str, Any]], int]:
        _, rows = queries.session_rows(con, session_ids=ids, scope=scope, limit=len(ids))
        return rows, applied_seq(con)

    rows, seq = await query(read)
    with anyio.move_on_after(DECIDED_WITHIN_S):
        while len(rows) < len(ids) or not all(_decided(r) for r in rows):
            await moved(seq)
            rows, seq = await query(read)
    order = {sid: n for n, sid in enumerate(ids)}
    return sorted(rows, key=lambda r: order[r["session_id"]])
