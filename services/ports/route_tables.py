"""Where a router gets the route tables its proxies must serve (``docs/serving.md``)."""

from collections.abc import AsyncIterator
from typing import Protocol

from services.domain.serving.route_table import RouteTable

__all__ = ["RouteTables"]


class RouteTables(Protocol):
    """The tables to serve: the current one first, then each newer one, until the source
    ends. A source may skip tables in between: each is the whole desired state, so only
    the newest matters (the serving fold feeds one; ``services.actors.router.TableFeed``
    is one a fold can publish to)."""

    def __aiter__(self) -> AsyncIterator[RouteTable]: ...
