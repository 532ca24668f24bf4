"""The web UI's browser sessions: what a cookie stands for, kept on the server.

The cookie holds an opaque random id and nothing else. The server keeps, per browser
session, the access key it signed in with, a CSRF token, when it started and was last
used, and, from the first write on, the user's own connection to the bus (``Acting``),
opened with the secret given at sign-in (``docs/architecture.md``, "The web UI and who
acts"). A session ends at sign-out, after ``IDLE_S`` unused or ``MAX_AGE_S`` in all, when
the store is full and it is the oldest, or when its keypair is revoked or its user removed
(the guard sees that at the next request); its connection is closed with it.
"""

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from events import SessionType, Slots, VfolderMount

__all__ = [
    "COOKIE",
    "IDLE_S",
    "MAX_AGE_S",
    "ActAs",
    "Acting",
    "BadLaunch",
    "BrowserSession",
    "BrowserSessions",
    "Launch",
    "NoActing",
]

COOKIE = "fgpu_ui"
IDLE_S = 30 * 60
MAX_AGE_S = 8 * 3600
MAX_SESSIONS = 10_000  # a flood of sign-ins costs the oldest sessions, never the memory


@dataclass(frozen=True)
class Launch:
    """What a launch asks for: ``count`` sessions, each as ``SessionRequested``'s fields
    of the same names say; ``request_id`` makes it once (the CLI's ``--request-id``)."""

    image: str
    slots: Slots
    count: int = 1
    request_id: str | None = None
    command: tuple[str, ...] = ()
    name: str | None = None
    project: str | None = None
    group: str | None = None
    cpu_only: bool = False
    session_type: SessionType | None = None
    mounts: tuple[VfolderMount, ...] = ()


class BadLaunch(ValueError):
    """A launch that could never be run as written (what ``fgpu session create`` refuses
    before sending); the message says why. Nothing was sent."""


class Acting(Protocol):
    """A user's own connection to the bus: each request published in the user's name,
    exactly as the CLI publishes it (the server lets it publish nothing else)."""

    async def create(self, launch: Launch) -> list[str]:
        """Ask for the sessions of ``launch``; their ids, in order. Raises BadLaunch
        (nothing sent), LogError (RequestsRefused, OutcomeUnknown)."""
        ...

    async def destroy(self, session_id: str) -> str:
        """Ask to end ``session_id``; the request's id. Raises LogError (RequestsRefused,
        OutcomeUnknown)."""
        ...

    async def aclose(self) -> None: ...


# Connects as (access key, secret). Raises LogError when the server refuses or is away.
ActAs = Callable[[str, str], Awaitable[Acting]]


class NoActing(Exception):
    """This API was started without a way to reach the bus as its users."""


@dataclass(eq=False)
class BrowserSession:
    id: str
    access_key: str
    csrf: str
    started: float
    seen: float
    secret: str = field(repr=False)
    acting: Acting | None = field(default=None, repr=False)
    lock: anyio.Lock = field(default_factory=anyio.Lock, repr=False)

    @property
    def expires(self) -> float:
        """When it ends if unused from now."""
        return min(self.seen + IDLE_S, self.started + MAX_AGE_S)


class BrowserSessions:
    """Browser sessions by id; ``act`` opens a user's connection (None: writes refused)."""

    def __init__(self, now: Callable[[], float], act: ActAs | None = None) -> None:
        self._now = now
        self._act = act
        self._by_id: dict[str, BrowserSession] = {}

    async def start(self, access_key: str, secret: str) -> BrowserSession:
        """A new session for a keypair whose secret was just checked."""
        now = self._now()
        for s in [s for s in self._by_id.values() if s.expires <= now]:
            await self._forget(s)
        while len(self._by_id) >= MAX_SESSIONS:
            await self._forget(min(self._by_id.values(), key=lambda s: s.seen))
        sid = secrets.token_urlsafe(32)
        s = BrowserSession(sid, access_key, secrets.token_urlsafe(32), now, now, secret)
        self._by_id[sid] = s
        return s

    async def get(self, sid: str) -> BrowserSession | None:
        """The live session ``sid`` names, marked used now; None if there is none (never
        was, signed out, expired)."""
        s = self._by_id.get(sid)
        if s is None:
            return None
        now = self._now()
        if s.expires <= now:
            await self._forget(s)
            return None
        s.seen = now
        return s

    def holds(self, sid: str) -> bool:
        """Whether ``sid`` is a live session (not marked used: an open stream asks)."""
        s = self._by_id.get(sid)
        return s is not None and s.expires > self._now()

    async def end(self, sid: str) -> None:
        """End ``sid`` (nothing if it is gone already) and close its connection."""
        s = self._by_id.get(sid)
        if s is not None:
            await self._forget(s)

    async def acting(self, s: BrowserSession) -> Acting:
        """The user's connection of ``s``, opened on first use. Raises NoActing, LogError."""
        if self._act is None:
            raise NoActing("this API was started without the bus's address: it cannot act")
        async with s.lock:
            if s.id not in self._by_id:
                raise NoActing("the browser session ended")
            if s.acting is None:
                s.acting = await self._act(s.access_key, s.secret)
                if s.id not in self._by_id:  # ended while it connected
                    await self._forget(s)
                    raise NoActing("the browser session ended")
            return s.acting

    async def aclose(self) -> None:
        """End every session and close their connections (the server stops)."""
        for s in list(self._by_id.values()):
            await self._forget(s)

    async def _forget(self, s: BrowserSession) -> None:
        self._by_id.pop(s.id, None)
        s.secret = ""
        acting, s.acting = s.acting, None
        if acting is not None:
            with anyio.CancelScope(shield=True):
                await acting.aclose()
