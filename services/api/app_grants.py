"""Who may reach an app through the apps origin: one-time tickets, and the cookies they
are exchanged for (``docs/architecture.md``, "Apps through the proxy").

The UI's page asks for a ticket by a CSRF-checked POST (``ui_apps``); the apps origin
takes it once (``redeem``) and sets a cookie of its own, ``APP_COOKIE``, whose value names
a grant kept here: one browser session of the UI, one session of the cluster, one of its
apps. The cookie's path is that app's (``app_path``), and a request is let through only
if one of the grants its cookies name is for the very session and app its path names
(``admit``): a grant never opens another app, another session's, or another user's. A
grant lives while its browser session does (sign-out, expiry, a revoked key end it: the
caller asks the browser sessions) and at most ``GRANT_S``.
"""

import secrets
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "APP_COOKIE",
    "GRANT_S",
    "TICKET_S",
    "AppGrant",
    "AppGrants",
    "app_path",
    "cookie_values",
]

APP_COOKIE = "fgpu_app"
TICKET_S = 30.0
GRANT_S = 8 * 3600.0
MAX_GRANTS = 10_000  # a flood of tickets costs the oldest grants, never the memory


def app_path(session_id: str, service: str) -> str:
    """Where the apps origin serves ``service`` of ``session_id``, with its last slash."""
    return f"/apps/{session_id}/{service}/"


def cookie_values(header: str, name: str) -> list[str]:
    """Every value of cookie ``name`` in a ``Cookie`` header (a browser sends one per
    path that matches, all of the same name)."""
    found = []
    for part in header.split(";"):
        key, eq, value = part.strip().partition("=")
        if eq and key == name:
            found.append(value)
    return found


@dataclass(frozen=True)
class AppGrant:
    """The right of one browser session (``browser``, its id) to one app of one session."""

    browser: str
    session_id: str
    service: str
    until: float

    def opens(self, session_id: str, service: str) -> bool:
        """Whether it is for ``service`` of ``session_id``."""
        return (self.session_id, self.service) == (session_id, service)


class AppGrants:
    """Tickets and grants, by their random words; ``now`` is the browser sessions' clock."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._tickets: dict[str, AppGrant] = {}
        self._grants: dict[str, AppGrant] = {}

    def ticket(self, browser: str, session_id: str, service: str) -> str:
        """A one-time ticket for ``browser`` to open ``service`` of ``session_id``, good
        for ``TICKET_S``."""
        now = self._now()
        self._tickets = {t: g for t, g in self._tickets.items() if g.until > now}
        self._trim(self._tickets)
        word = secrets.token_urlsafe(32)
        self._tickets[word] = AppGrant(browser, session_id, service, now + TICKET_S)
        return word

    def redeem(self, ticket: str) -> tuple[str, AppGrant] | None:
        """The cookie's value and grant that ``ticket`` is exchanged for; None if it is no
        live ticket. A ticket is used up either way."""
        found = self._tickets.pop(ticket, None)
        now = self._now()
        if found is None or found.until <= now:
            return None
        self._grants = {w: g for w, g in self._grants.items() if g.until > now}
        self._trim(self._grants)
        word = secrets.token_urlsafe(32)
        grant = AppGrant(found.browser, found.session_id, found.service, now + GRANT_S)
        self._grants[word] = grant
        return word, grant

    def admit(self, cookies: list[str], session_id: str, service: str) -> AppGrant | None:
        """The live grant among ``cookies``' for ``service`` of ``session_id``; None if
        none is."""
        now = self._now()
        for word in cookies:
            g = self._grants.get(word)
            if g is not None and g.until > now and g.opens(session_id, service):
                return g
        return None

    @staticmethod
    def _trim(held: dict[str, AppGrant]) -> None:
        while len(held) >= MAX_GRANTS:
            held.pop(next(iter(held)))
