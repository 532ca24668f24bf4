"""A session's apps in the web UI: the services its image declares, listed on its page,
and a one-time ticket to open one on the apps origin (``app_proxy``; ``docs/
architecture.md``, "Apps through the proxy"). An app is its session's owner's alone: its
content is the container's, and a user opening another's would hand that page the
viewer's grant.

Who may use each route (``tests/api/test_ui.py``):
- ``GET /ui/sessions/{id}/apps``: a browser session whose viewer sees that session (else
  404, as the read API answers); the list is the owner's alone (another viewer is told
  so), asked of the session's agent as the user (the agent judges the key as for an app);
- ``POST /ui/sessions/{id}/apps/{service}/ticket``: the same, with its CSRF token, the
  session the user's own (else 403); the apps origin then admits the ticket once, from
  the same browser.
"""

from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

from services.api.app_grants import TICKET_S, AppGrants
from services.api.app_proxy import AppsOrigin
from services.api.browser import NoActing, ShellRefused
from services.api.guard import Browser, Guard
from services.api.params import NOT_FOUND, Ask
from services.api.session_routes import one_session
from services.ports import LogError

__all__ = ["App", "AppTicket", "Apps", "mount"]

_OWNERS_ONLY = "apps open for the session's owner only"


class App(BaseModel):
    """A service the session's image declares (``fgpu.service.<name>=<protocol>:<port>``)."""

    name: str
    protocol: str
    port: int


class Apps(BaseModel):
    """A session's apps, or why none are listed."""

    apps: list[App]
    error: str | None = None


class AppTicket(BaseModel):
    """Where the browser goes to open the app: the apps origin, with a one-time ticket."""

    url: str
    expires_at: datetime


def mount(app: FastAPI, query: Ask[Any], guard: Guard) -> None:
    """The apps' routes on ``app``; the apps origin that serves them is
    ``app.state.apps`` (served on its own listener: ``serve.py``, which sets
    ``app.state.apps_port``)."""
    grants = AppGrants(guard.browsers.now)
    app.state.apps = AppsOrigin(query, guard, grants)
    app.state.apps_port = None

    @app.get("/ui/sessions/{session_id}/apps", include_in_schema=False, responses=NOT_FOUND)
    async def apps(session_id: str, who: Browser) -> Apps:
        """The services the session's image declares, asked of its agent as the user."""
        s, viewer = who
        row = await query(lambda con: one_session(con, session_id, viewer))  # else 404
        if row["owner"] != viewer.access_key:
            return Apps(apps=[], error=_OWNERS_ONLY)
        if row["status"] != "RUNNING" or row["agent_id"] is None:
            return Apps(apps=[], error=f"the session is not running ({row['status']})")
        try:
            acting = await guard.browsers.acting(s)
            found = await acting.services(row["agent_id"], session_id)
        except (NoActing, ShellRefused, LogError) as e:
            return Apps(apps=[], error=str(e))
        return Apps(apps=[App(name=n, protocol=p, port=port) for n, p, port in found])

    @app.post(
        "/ui/sessions/{session_id}/apps/{service}/ticket",
        include_in_schema=False,
        responses=NOT_FOUND,
    )
    async def ticket(session_id: str, service: str, request: Request, who: Browser) -> AppTicket:
        """A one-time ticket to open ``service`` on the apps origin (a write: its origin
        and CSRF token are checked)."""
        s, viewer = who
        row = await query(lambda con: one_session(con, session_id, viewer))  # else 404
        if row["owner"] != viewer.access_key:
            raise HTTPException(403, _OWNERS_ONLY)
        port = request.app.state.apps_port
        if port is None:
            raise HTTPException(503, "this API serves no apps: start it with --apps-port")
        word = grants.ticket(s.id, session_id, service)
        url = request.url.replace(port=port, path="/open", query=f"ticket={word}")
        until = datetime.fromtimestamp(guard.browsers.now() + TICKET_S, UTC)
        return AppTicket(url=str(url), expires_at=until)
