"""Who came in, who was turned away: the access audit.

Written by the doors, never by a person: the gatekeeper (``via`` ``nats``: a connection)
and the read API (``via`` ``api``: a sign-in, a refused request), each on its own subject
``fgpu.access.<door>``. ``owner`` is the access key given (as given: it may name no
keypair), so that the audit log finds a key's accesses with its other events. A flood is
not written event by event: beyond a few per key and window, accesses are counted and
one ``access.suppressed`` says how many were not written.

The intake (``fgpu.access.intake``), the first reader of people's requests, writes no
record per request it drops: ``access.requests-dropped`` counts them per key and window.
"""

from datetime import datetime
from typing import Literal

from events.base import Event

__all__ = ["AccessGranted", "AccessRefused", "AccessSuppressed", "Door", "RequestsDropped"]

Door = Literal["nats", "api"]


class AccessGranted(Event, frozen=True, kw_only=True, tag="access.granted.v1"):
    """``owner`` was let in as ``identity`` (``user:<name>`` or ``service:<kind>``)."""

    via: Door
    owner: str
    identity: str
    client: str | None = None  # the client's address or name, when the door knows it


class AccessRefused(Event, frozen=True, kw_only=True, tag="access.refused.v1"):
    """``owner`` (the key given; empty: none) was refused ``what`` (``connect``,
    ``sign in``, ``GET /v1/sessions``), and ``reason`` says why."""

    via: Door
    owner: str
    what: str
    reason: str
    client: str | None = None


class AccessSuppressed(Event, frozen=True, kw_only=True, tag="access.suppressed.v1"):
    """Between ``since`` and this event's time, ``granted`` accesses and ``refused`` ones
    of ``owner`` (``*``: of keys beyond the window's cap) through ``via`` were counted but
    not written, each kind beyond its allowance for the window."""

    via: Door
    owner: str
    since: datetime
    granted: int = 0
    refused: int = 0


class RequestsDropped(Event, frozen=True, kw_only=True, tag="access.requests-dropped.v1"):
    """Between ``since`` and this event's time the intake dropped requests of ``owner``
    (an access key) instead of putting them on the log: ``rate_limited`` beyond the key's
    rate, ``refused`` that could never stand (not an event, a request in another key's
    name, a session id already taken); ``reason`` is why the first refused one was."""

    owner: str
    since: datetime
    rate_limited: int = 0
    refused: int = 0
    reason: str | None = None
