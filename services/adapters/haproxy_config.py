"""HAProxy's configuration for a route table, as pure functions (``docs/serving.md``).

What HAProxy's runtime API can change (a server's address, weight, state; the token map)
is changed there (``haproxy_proxy``); what it cannot (routes, a backend's balance, health
checks, its number of server slots) is written here and loaded by a graceful reload. So
the configuration is split in two: the ``shape`` (what needs a reload when it changes)
and the rest, and the file written always holds both, whole, so that a reload or a
restarted HAProxy serves the table at once.

Each route is one backend with a fixed number of server *slots* (a power of two); a
replica takes a free slot (address and weight set at run time) and keeps it while it is in
the table, so replicas coming and going never reload HAProxy until the slots are full.
A slot with no replica is in maintenance. A connection a server refuses is retried on
another (``option redispatch 1``: every retry may change server, and a retry to another
server waits for nothing): a replica is stopped once its draining is on the log, and a
proxy may still send it a request until it applies the table without it or its checks
fail; on the same server, HAProxy would wait a second a retry, then answer 503.
Tokens live in one map file, keyed by
``<sha256 hex>@<backend>``, replaced atomically at run time (``prepare``/``commit map``).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from services.domain.serving.route_table import Backend, Route

__all__ = [
    "LUA_WAIT",
    "MIN_SLOTS",
    "Layout",
    "Paths",
    "assign_slots",
    "backend_name",
    "render",
    "shape",
    "token_key",
    "token_map",
]

MIN_SLOTS = 4
EMPTY_ADDRESS = "127.0.0.1:1"  # where an empty slot points; never used (it is in maintenance)

# Holds a request to a backend with no server in rotation until one comes (scale to zero).
# core.msleep yields to HAProxy's scheduler: a waiting request costs no thread, and
# tune.lua.session-timeout counts Lua's own running time, not its sleeps.
LUA_WAIT = """\
core.register_action("fgpu_wait_backend", {"http-req"}, function(txn, backend, ms)
  local left = tonumber(ms)
  while left > 0 and txn.f:nbsrv(backend) == 0 do
    core.msleep(10)
    left = left - 10
  end
end, 2)
"""

_PREFIX = re.compile(r"/(?:[A-Za-z0-9._~-]+/)*")
_HOST = re.compile(r"[A-Za-z0-9.-]+")
_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")

Slots = tuple[Backend | None, ...]


@dataclass(frozen=True)
class Paths:
    """Where one HAProxy keeps its files: all under one private directory."""

    admin_socket: str
    token_map: str
    lua: str


@dataclass(frozen=True)
class Layout:
    """A table as HAProxy serves it: its routes and, by endpoint id, each backend's slots."""

    routes: tuple[Route, ...]
    slots: Mapping[str, Slots]


def backend_name(route: Route) -> str:
    """HAProxy's name for a route's backend. Raises ValueError for an id HAProxy's
    configuration cannot carry as it is."""
    if not _ID.fullmatch(route.endpoint_id):
        raise ValueError(f"endpoint id {route.endpoint_id!r} is not 1-64 of [A-Za-z0-9_.-]")
    return f"ep_{route.endpoint_id}"


def token_key(route: Route, sha256_hex: str) -> str:
    return f"{sha256_hex}@{backend_name(route)}"


def token_map(routes: tuple[Route, ...]) -> list[str]:
    """The token map's keys: every token of every route that is not public."""
    return sorted(token_key(r, h) for r in routes if not r.public for h in r.token_sha256)


def assign_slots(before: Slots | None, backends: tuple[Backend, ...]) -> Slots:
    """Each backend's slot: the one it had (by session id), else the first free one; the
    slots double (from ``MIN_SLOTS``) when there are more backends than slots, and never
    shrink while the route lives (a shrink would reload to save nothing)."""
    slots: list[Backend | None] = list(before or (None,) * MIN_SLOTS)
    wanted = {b.session_id: b for b in backends}
    held: set[str] = set()
    for i, old in enumerate(slots):
        if old is not None and old.session_id in wanted:
            slots[i] = wanted[old.session_id]
            held.add(old.session_id)
        else:
            slots[i] = None
    for b in backends:
        if b.session_id in held:
            continue
        if None not in slots:
            slots += [None] * len(slots)
        slots[slots.index(None)] = b
    return tuple(slots)


def shape(layout: Layout) -> tuple[object, ...]:
    """What HAProxy must reload to change: every route but its backends and tokens, and
    its number of slots. Two layouts of one shape differ only in what the runtime API sets."""
    return tuple(_route_shape(r, len(layout.slots[r.endpoint_id])) for r in layout.routes)


def _route_shape(r: Route, slots: int) -> tuple[object, ...]:
    return (
        r.endpoint_id,
        r.path_prefix,
        r.host,
        r.public,
        r.balance,
        r.cold_start_s,
        r.health,
        slots,
    )


def render(layout: Layout, paths: Paths, port: int) -> str:
    """The whole configuration: listening on 127.0.0.1:``port``. Raises ValueError for a
    route HAProxy could not be told safely (a prefix or host outside the plain forms)."""
    head = f"""\
global
  stats socket {paths.admin_socket} mode 600 level admin
  lua-load {paths.lua}
  hard-stop-after 10m

defaults
  mode http
  retries 3
  option redispatch 1
  timeout connect 2s
  timeout client 300s
  timeout server 300s
  timeout http-request 10s
  timeout http-keep-alive 10s
  timeout queue 10s

frontend serve
  bind 127.0.0.1:{port}
"""
    ordered = sorted(layout.routes, key=_precedence)
    front = [_frontend_rule(i, r) for i, r in enumerate(ordered)]
    backs = [_backend(r, layout.slots[r.endpoint_id], paths) for r in ordered]
    missing = """
backend no_route
  http-request return status 404 content-type text/plain string "no such endpoint"
"""
    return head + "".join(front) + "  default_backend no_route\n" + "".join(backs) + missing


def _precedence(route: Route) -> tuple[int, int]:
    """Host routes first; then the longest prefix, so ``/e/a/b/`` wins over ``/e/a/``."""
    return (0 if route.host else 1, -len(route.path_prefix))


def _frontend_rule(i: int, route: Route) -> str:
    if route.host:
        if not _HOST.fullmatch(route.host):
            raise ValueError(f"route {route.name}: host {route.host!r} is not a plain name")
        acl = f"  acl r{i} req.hdr(host),field(1,:),lower -m str {route.host.lower()}\n"
    else:
        if not _PREFIX.fullmatch(route.path_prefix):
            raise ValueError(f"route {route.name}: prefix {route.path_prefix!r} is not /a/b/")
        acl = f"  acl r{i} path_beg {route.path_prefix}\n"
    return acl + f"  use_backend {backend_name(route)} if r{i}\n"


def _backend(route: Route, slots: Slots, paths: Paths) -> str:
    name = backend_name(route)
    h = route.health
    if not h.path.startswith("/") or " " in h.path:
        raise ValueError(f"route {route.name}: health path {h.path!r}")
    lines = [
        f"\nbackend {name}",
        f"  balance {route.balance.value}",
        f"  option httpchk GET {h.path}",
        f"  timeout check {_ms(h.timeout_s)}",
    ]
    if not route.public:
        lines += _token_rules(name, paths.token_map)
    if route.cold_start_s > 0:
        wait = f"lua.fgpu_wait_backend {name} {round(route.cold_start_s * 1000)}"  # Lua: a number
        lines.append(f"  http-request {wait} if {{ nbsrv({name}) eq 0 }}")
    if not route.host:  # the prefix is stripped: the replica sees /rest of the path
        lines.append(f"  http-request set-path %[path,bytes({len(route.path_prefix) - 1})]")
    check = f"check inter {_ms(h.interval_s)} rise {h.healthy_after} fall {h.unhealthy_after}"
    for i, b in enumerate(slots):
        where, weight = (EMPTY_ADDRESS, 0) if b is None else (f"{b.host}:{b.port}", b.weight)
        off = " disabled" if b is None else ""
        lines.append(f"  server s{i} {where} weight {weight} {check}{off}")
    return "\n".join(lines) + "\n"


def _token_rules(name: str, token_file: str) -> list[str]:
    """401 unless ``Authorization: Bearer <t>`` with sha256(t)@backend in the map; the
    header never reaches the replica (a token is the proxy's business)."""
    key = f'req.hdr(authorization),regsub("^Bearer ",""),sha2(256),hex,lower,concat(@{name})'
    return [
        f"  http-request set-var(txn.fgpu_token) {key}",
        "  http-request return status 401 content-type text/plain"
        ' hdr WWW-Authenticate Bearer string "a valid token is required"'
        ' unless { req.hdr(authorization) -m beg "Bearer " }'
        f" {{ var(txn.fgpu_token),map({token_file}) -m found }}",
        "  http-request del-header authorization",
    ]


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"
