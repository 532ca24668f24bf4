"""What every proxy in front of the replicas must serve, as one value. Pure.

The serving fold (endpoints, revisions, replicas folded from the log) produces a
``RouteTable``; a router hands it to its ``Proxy`` (``services.ports.proxy``), which makes
the proxy serve exactly that table. The table is the whole desired state, never a diff:
applying the same table twice changes nothing, and a router that restarts, or a second
router beside it, only needs the log to get to the same table. So several proxies can
run at once, each fed from the log, and none holds state the log does not.

Invariants a table keeps (``RouteTable.__post_init__`` does not check them; the fold
that builds one does, and the contract tests of every ``Proxy`` feed it only valid ones):

* endpoint names are unique, and so are their ``path_prefix`` and ``host`` values;
* a backend's ``weight`` is 0 (out of rotation: unhealthy, warming or draining; in-flight
  requests finish, no new ones come) to 256; a route with no backend of weight > 0
  answers 503 at once, unless ``cold_start_s`` > 0: then the proxy holds the request up
  to that long for a backend to come into rotation (scale to zero);
* ``token_sha256`` holds the lower-case hex SHA-256 of each valid token (never a token
  itself); a request to a non-public route must carry ``Authorization: Bearer <token>``
  whose hash is in the set, or it gets 401 and never reaches a replica.
"""

from enum import StrEnum

import msgspec

__all__ = ["Backend", "Balance", "HealthCheck", "Route", "RouteTable"]


class Balance(StrEnum):
    ROUND_ROBIN = "roundrobin"
    LEAST_CONNECTIONS = "leastconn"


class Backend(msgspec.Struct, frozen=True, kw_only=True):
    """One replica: the session that runs it and where the proxy reaches its port."""

    session_id: str
    host: str
    port: int
    weight: int = 100


class HealthCheck(msgspec.Struct, frozen=True, kw_only=True):
    """How a replica is checked: ``GET path`` every ``interval_s``, an answer in 2xx/3xx
    within ``timeout_s`` passes; ``healthy_after`` passes in a row bring a replica into
    rotation, ``unhealthy_after`` failures in a row take it out. None of it starts before
    ``initial_delay_s`` after the replica runs."""

    path: str = "/health"
    interval_s: float = 2.0
    timeout_s: float = 1.0
    initial_delay_s: float = 0.0
    healthy_after: int = 1
    unhealthy_after: int = 2


class Route(msgspec.Struct, frozen=True, kw_only=True):
    """One endpoint as the proxy sees it. Requests match ``host`` (when set) or start
    with ``path_prefix`` (``/e/<name>/``, stripped before the replica sees the path)."""

    endpoint_id: str
    name: str
    path_prefix: str
    host: str | None = None
    public: bool = False
    token_sha256: frozenset[str] = frozenset()
    balance: Balance = Balance.ROUND_ROBIN
    cold_start_s: float = 0.0
    health: HealthCheck = HealthCheck()
    backends: tuple[Backend, ...] = ()


class RouteTable(msgspec.Struct, frozen=True, kw_only=True):
    routes: tuple[Route, ...] = ()
