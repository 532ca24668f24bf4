"""The router: keeps every proxy serving the newest route table, and tells of replicas'
health as the proxies' checks see it (``docs/serving.md``).

Desired state in, each proxy's ``apply`` called until it serves it: the reconcile loop of
a controller. Each proxy has its own lane, so a proxy that is down delays no other; a
failed ``apply`` (``ProxyUnavailable``) is retried with a growing pause, or at once when
a newer table comes (only the newest matters: each table is whole). A table a proxy
refuses as invalid (``ValueError``) is logged and left until a newer one. A proxy whose
``health`` fails is applied again once it answers (a restarted proxy serves nothing).

Health is polled; ``on_health_change(session_id, healthy, detail)`` is called only when
a replica's health differs from what it was last told (or, at start, from
``known_health``: what the log already says), so a restarted router repeats nothing the
log holds. A replica is healthy when every proxy that checked it says so. A replica's
first verdict, if unhealthy, waits for its route's ``initial_delay_s`` from when the
router first saw it in a table: a replica still starting is not reported as failing.
The router holds no state of its own that the log and the proxies do not give back.
"""

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import structlog
from anyio.abc import TaskStatus

from services.domain.serving.route_table import HealthCheck, RouteTable
from services.ports.proxy import Proxy, ProxyUnavailable, RouteStats
from services.ports.route_tables import RouteTables

__all__ = ["HealthChanged", "Router", "TableFeed"]

log = structlog.get_logger()

HealthChanged = Callable[[str, bool, str], Awaitable[None]]
RETRY_MAX_S = 5.0


class TableFeed:
    """A ``RouteTables`` a fold publishes to: iterating it yields the current table, then
    the newest each time it changes (tables published in between are skipped)."""

    def __init__(self) -> None:
        self._table: RouteTable | None = None
        self._version = 0
        self._closed = False
        self._changed = anyio.Event()

    def publish(self, table: RouteTable) -> None:
        if table != self._table:
            self._table = table
            self._version += 1
            self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def __aiter__(self) -> AsyncIterator[RouteTable]:
        seen = 0
        while True:
            changed = self._changed
            if self._version > seen and self._table is not None:
                seen = self._version
                yield self._table
            elif self._closed:
                return
            else:
                await changed.wait()


@dataclass(eq=False)
class _Lane:
    proxy: Proxy
    applied: RouteTable | None = None
    refused: RouteTable | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)


@dataclass(eq=False)
class Router:
    tables: RouteTables
    proxies: Sequence[Proxy]
    on_health_change: HealthChanged
    known_health: Mapping[str, bool] = field(default_factory=dict)
    health_every_s: float = 1.0
    retry_s: float = 0.2

    def __post_init__(self) -> None:
        self._table: RouteTable | None = None
        self._lanes = [_Lane(p) for p in self.proxies]
        self._known = dict(self.known_health)
        self._first_seen: dict[str, float] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the source's tables until it ends or this is cancelled. Ready
        (``task_status``) once every lane and the health watch run."""
        async with anyio.create_task_group() as tg:
            for lane in self._lanes:
                tg.start_soon(self._keep_applied, lane)
            tg.start_soon(self._watch_health)
            task_status.started()
            async for table in self.tables:
                self._table = table
                for lane in self._lanes:
                    lane.wake.set()
            tg.cancel_scope.cancel()

    async def stats(self) -> dict[str, RouteStats]:
        """Each route's traffic over every proxy that answers (counts summed, the worst
        p95), the input of autoscaling."""
        out: dict[str, RouteStats] = {}
        for lane in self._lanes:
            try:
                got = await lane.proxy.stats()
            except ProxyUnavailable:
                continue
            for eid, s in got.items():
                out[eid] = _sum(out[eid], s) if eid in out else s
        return out

    async def _keep_applied(self, lane: _Lane) -> None:
        pause = self.retry_s
        while True:
            lane.wake = anyio.Event()  # before reading: a wake after this is not lost
            table = self._table
            if table is None or table in (lane.applied, lane.refused):
                await lane.wake.wait()
                continue
            try:
                await lane.proxy.apply(table)
            except ProxyUnavailable as e:
                log.warning("router.apply_failed", error=str(e), retry_in_s=pause)
                with anyio.move_on_after(pause):
                    await lane.wake.wait()
                pause = min(pause * 2, RETRY_MAX_S)
                continue
            except ValueError as e:
                log.error("router.table_refused", error=str(e))
                lane.refused = table
                continue
            lane.applied, pause = table, self.retry_s

    async def _watch_health(self) -> None:
        while True:
            table = self._table
            if table is not None:
                await self._report(table, await self._verdicts())
            await anyio.sleep(self.health_every_s)

    async def _verdicts(self) -> dict[str, tuple[bool, str]]:
        """Each checked replica's health over the proxies: unhealthy if any says so."""
        merged: dict[str, tuple[bool, str]] = {}
        for lane in self._lanes:
            try:
                health = await lane.proxy.health()
            except ProxyUnavailable as e:
                log.warning("router.health_failed", error=str(e))
                lane.applied = None  # applied again once it answers
                lane.wake.set()
                continue
            for sid, h in health.items():
                if sid not in merged or merged[sid][0]:
                    merged[sid] = (h.healthy, h.detail)
        return merged

    async def _report(self, table: RouteTable, verdicts: dict[str, tuple[bool, str]]) -> None:
        now = anyio.current_time()
        placed: dict[str, HealthCheck] = {
            b.session_id: r.health for r in table.routes for b in r.backends
        }
        for gone in set(self._first_seen) - set(placed):
            del self._first_seen[gone]
            self._known.pop(gone, None)
        for sid, check in placed.items():
            first = self._first_seen.setdefault(sid, now)
            if sid not in verdicts:
                continue
            healthy, detail = verdicts[sid]
            before = self._known.get(sid)
            if before is healthy or (
                before is None and not healthy and now - first < check.initial_delay_s
            ):
                continue
            try:
                await self.on_health_change(sid, healthy, detail)
            except Exception as e:  # told again at the next poll: the log may be back
                log.warning("router.health_report_failed", session_id=sid, error=repr(e))
                continue
            self._known[sid] = healthy


def _sum(a: RouteStats, b: RouteStats) -> RouteStats:
    p95s = [p for p in (a.p95_ms, b.p95_ms) if p is not None]
    return RouteStats(
        requests_total=a.requests_total + b.requests_total,
        in_flight=a.in_flight + b.in_flight,
        queued=a.queued + b.queued,
        p95_ms=max(p95s) if p95s else None,
    )
