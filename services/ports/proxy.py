"""The proxy in front of serving replicas, as routers drive it (``docs/serving.md``)."""

from collections.abc import Mapping
from typing import Protocol

import msgspec

from services.domain.serving.route_table import RouteTable

__all__ = ["BackendHealth", "Proxy", "ProxyUnavailable", "RouteStats"]


class ProxyUnavailable(Exception):
    """The proxy did not answer or refused a change: retry later (the table is whole, so
    the next ``apply`` repairs whatever this one left half done)."""


class BackendHealth(msgspec.Struct, frozen=True, kw_only=True):
    """What the proxy's own checks say of one replica now."""

    session_id: str
    healthy: bool
    detail: str = ""


class RouteStats(msgspec.Struct, frozen=True, kw_only=True):
    """One endpoint's traffic as the proxy counts it (monotonic counters since the proxy
    started, and gauges now), the input of autoscaling rules."""

    requests_total: int
    in_flight: int
    queued: int
    p95_ms: float | None = None


class Proxy(Protocol):
    """A proxy that serves a ``RouteTable``: every change to it goes through ``apply``
    with the whole table, so applying a table twice is a no-op and a restarted proxy is
    brought back by its router's next ``apply``."""

    @property
    def address(self) -> tuple[str, int]:
        """Where clients reach it (host, port)."""
        ...

    async def apply(self, table: RouteTable) -> None:
        """Serve exactly ``table`` from now on, without dropping a request in flight.
        Raises ProxyUnavailable."""
        ...

    async def health(self) -> Mapping[str, BackendHealth]:
        """Each backend's health by session id, from the proxy's own checks."""
        ...

    async def stats(self) -> Mapping[str, RouteStats]:
        """Each route's traffic, by endpoint id."""
        ...
