"""The web UI's browser sessions: what a cookie stands for, kept on the server.

The cookie holds an opaque random id and nothing else. The server keeps, per browser
session, the access key it signed in with, a CSRF token, when it started and was last
used, and, from the first write on, the user's own connection to the bus (``Acting``),
opened with the secret given at sign-in (``docs/architecture.md``, "The web UI and who
acts"). A session ends at sign-out, after ``IDLE_S`` unused or ``MAX_AGE_S`` in all, when
the store is full and it is the oldest, or when its keypair is revoked or its user removed
(the guard sees that at the next request); its connection is closed with it, and every
terminal opened on it with the connection.

A terminal's WebSocket carries no CSRF header, so it is opened with a ticket instead: a
random one-time word that a CSRF-checked POST of the browser session obtains for one
session of the cluster, good for ``TICKET_S`` and once (``ticket``, ``redeem``).
"""

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from events import AdminCommand, ServeCommand, SessionType, Slots, VfolderMount
from services.ports import LogsReply

__all__ = [
    "COOKIE",
    "IDLE_S",
    "MAX_AGE_S",
    "TICKET_S",
    "ActAs",
    "Acting",
    "AppEnd",
    "BadLaunch",
    "BadRequestId",
    "BrowserSession",
    "BrowserSessions",
    "Launch",
    "NoActing",
    "ShellEnd",
    "ShellRefused",
]

COOKIE = "fgpu_ui"
IDLE_S = 30 * 60
MAX_AGE_S = 8 * 3600
MAX_SESSIONS = 10_000  # a flood of sign-ins costs the oldest sessions, never the memory
TICKET_S = 30.0
MAX_TICKETS = 16  # per browser session: asking for more drops its oldest


class AppEnd(Protocol):
    """The proxy's end of one connection to an app in a container: bytes both ways."""

    async def read(self) -> bytes | None:
        """The next bytes for the app; None once there are no more."""
        ...

    async def write(self, data: bytes) -> None: ...


class ShellEnd(Protocol):
    """The browser's end of a terminal: keys in, output out, its size when it opens."""

    async def read(self) -> bytes | None:
        """The next keys; None once the browser has gone."""
        ...

    async def write(self, data: bytes) -> None: ...

    def size(self) -> tuple[int, int]:
        """Rows and columns."""
        ...


class ShellRefused(Exception):
    """The agent did not open the terminal (or could not be reached); says why."""


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


class BadRequestId(ValueError):
    """A request id that could never name a request (what the CLI refuses before sending);
    the message says why. Nothing was sent."""


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

    async def admin(self, command: AdminCommand, request_id: str | None = None) -> str:
        """Ask the registrar to apply ``command``, as ``fgpu admin`` asks (an admin request
        in the user's name; the same ``request_id`` is the same request); the request's id.
        Raises BadRequestId (nothing sent), LogError (RequestsRefused, OutcomeUnknown)."""
        ...

    async def serve(self, command: ServeCommand, request_id: str | None = None) -> str:
        """Ask the serving actor to apply ``command``, as ``fgpu serve`` asks (a serve
        request in the user's name; the same ``request_id`` is the same request); the
        request's id. Raises BadRequestId (nothing sent), LogError (RequestsRefused,
        OutcomeUnknown)."""
        ...

    async def logs(self, agent_id: str, session_id: str, tail: int) -> LogsReply:
        """The last ``tail`` lines of ``session_id``'s output, asked of ``agent_id`` as
        ``fgpu session logs`` asks. Raises ShellRefused when the agent is not reached."""
        ...

    async def follow(
        self,
        agent_id: str,
        session_id: str,
        tail: int,
        write: Callable[[bytes], Awaitable[None]],
    ) -> str:
        """``session_id``'s output, its last ``tail`` lines then as it comes, each piece
        given to ``write`` (the agent reads no further ahead than a window of what
        ``write`` has taken), as ``fgpu session logs --follow`` follows it; returns why it
        ended once the container has ended or the agent stopped it. Raises ShellRefused
        (refused, or the agent is not reached)."""
        ...

    async def shell(
        self,
        agent_id: str,
        session_id: str,
        end: ShellEnd,
        sizes: AsyncIterator[tuple[int, int]],
    ) -> str:
        """A terminal in ``session_id`` on ``end`` until it closes, as ``fgpu session shell``
        opens one (the agent checks who asks, and writes the opening and closing on the
        log); how it closed. Raises ShellRefused."""
        ...

    async def services(self, agent_id: str, session_id: str) -> list[tuple[str, str, int]]:
        """The services ``session_id``'s image declares, (name, protocol, port), asked of
        ``agent_id`` as the user. Raises ShellRefused (refused, or not reached)."""
        ...

    async def app(self, agent_id: str, session_id: str, service: str, end: AppEnd) -> str:
        """One connection to ``service`` in ``session_id`` on ``end`` until either side
        closes, as ``fgpu session app`` opens each (the agent checks who asks, and writes
        the opening and closing on the log); how it closed. Raises ShellRefused."""
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
    # One-time terminal tickets: ticket -> (the session of the cluster, good until).
    tickets: dict[str, tuple[str, float]] = field(default_factory=dict, repr=False)
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

    def now(self) -> float:
        """The time on the sessions' clock."""
        return self._now()

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

    def ticket(self, s: BrowserSession, session_id: str) -> str:
        """A one-time ticket of ``s`` to open a terminal in ``session_id``, good for
        ``TICKET_S``."""
        now = self._now()
        s.tickets = {t: v for t, v in s.tickets.items() if v[1] > now}
        while len(s.tickets) >= MAX_TICKETS:
            s.tickets.pop(next(iter(s.tickets)))
        word = secrets.token_urlsafe(32)
        s.tickets[word] = (session_id, now + TICKET_S)
        return word

    def redeem(self, s: BrowserSession, ticket: str, session_id: str) -> bool:
        """Whether ``ticket`` is one of ``s``'s, for ``session_id``, unexpired; it is used
        up either way (a ticket is tried once)."""
        found = s.tickets.pop(ticket, None)
        return found is not None and found[0] == session_id and found[1] > self._now()

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
        s.tickets.clear()
        acting, s.acting = s.acting, None
        if acting is not None:
            with anyio.CancelScope(shield=True):
                await acting.aclose()
