"""A router as a service of the cluster (``router:<id>``): the log's endpoints made into
route tables for its proxies, and what their checks find made into events.

It follows the log with the cluster's fold (through its own reads, no durable: routers
are many, stateless, and decide nothing another would), and after each batch hands
``route_table(state.serving, now)`` to the ``Router``'s ``TableFeed``. A table also
changes with time alone: a token that expires is dropped from it then, by a timer set
from the fold to the next expiry, with no event. A replica's health, when it changes as
the ``Router`` sees it, is appended as ``replica.health-reported`` on
``fgpu.route.<id>``, the one subject this service may publish; the serving actor turns
it into phases and rotation. What the log already says of a replica's health is what
the ``Router`` starts from, so a restarted router repeats none of it.

Each route's traffic over its proxies (``Router.stats``) is sampled every
``sample_every_s`` and appended as ``route.stats-reported`` on the same subject, over a
window of ``stats_every_s``, when it differs from the router's last report (as the log
holds it: a restart repeats nothing), and at once when requests begin to be in flight:
the input of autoscaling, and, with a request held at an endpoint that has no replica,
what wakes it from zero. The proxies' health and traffic are asked for every quarter
second (one ``show stat`` each on HAProxy's socket); the log hears only of changes.
"""

from collections.abc import Sequence
from datetime import datetime

import anyio
import structlog
from anyio.abc import TaskStatus

from events import ReplicaHealthReported, RouteStatsReported
from events import subjects as subj
from services.actors.common import follow_log, stamp
from services.actors.router import Router, TableFeed
from services.actors.snapshots import Snapshots
from services.domain.fold.cluster import ClusterState
from services.domain.provenance import Provenance
from services.domain.serving.routes import next_expiry, route_table
from services.ports import Clock, EventLog
from services.ports.proxy import Proxy, RouteStats

__all__ = ["RouterService"]

log = structlog.get_logger()


_Figures = tuple[int, int, int | None]


def _figures(e: RouteStatsReported) -> _Figures:
    """What a report says, its window aside (a window's length jitters): requests, then
    those waiting (in flight and queued), then the p95."""
    return (e.requests, e.in_flight + e.queued, e.p95_ms)


class RouterService:
    """Router ``router_id`` keeping ``proxies`` at the log's route table."""

    def __init__(
        self,
        events: EventLog,
        clock: Clock,
        router_id: str,
        proxies: Sequence[Proxy],
        *,
        snapshots: Snapshots | None = None,
        health_every_s: float = 0.25,
        stats_every_s: float = 1.0,
        sample_every_s: float = 0.25,
    ) -> None:
        self.events = events
        self.clock = clock
        self.router_id = router_id
        self.proxies = proxies
        self.snapshots = snapshots
        self.health_every_s = health_every_s
        self.stats_every_s = stats_every_s
        self.sample_every_s = sample_every_s
        self.feed = TableFeed()
        self._state = ClusterState()
        self._rescheduled = anyio.Event()

    @property
    def name(self) -> str:
        return f"router:{self.router_id}"

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Route for ever; started once the first table is handed to the proxies' lanes."""
        async with anyio.create_task_group() as tg:
            state: ClusterState = await tg.start(self._follow)
            known = {
                sid: r.reported_healthy
                for ep in state.serving.endpoints.values()
                for sid, r in ep.replicas.items()
                if r.reported_healthy is not None
            }
            router = Router(
                self.feed,
                self.proxies,
                self._report,
                known_health=known,
                health_every_s=self.health_every_s,
            )
            await tg.start(router.run)
            tg.start_soon(self._expire)
            told = {
                eid: _figures(r)
                for eid, ep in state.serving.endpoints.items()
                if (r := ep.reports.get(self.router_id)) is not None
            }
            tg.start_soon(self._watch_stats, router, told)
            task_status.started()

    async def _follow(
        self, *, task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        await follow_log(
            self.events,
            self.name,
            self._react,
            task_status=task_status,
            on_rebuild=self._react,
            snapshots=self.snapshots,
            tail=True,
        )

    async def _react(self, s: ClusterState) -> None:
        self._state = s
        self._publish()

    def _publish(self) -> None:
        now = self.clock.now()
        self.feed.publish(route_table(self._state.serving, now))
        self._rescheduled.set()
        self._rescheduled = anyio.Event()

    async def _expire(self) -> None:
        """The table published again when the next token expires (its fold may not change
        then: expiry is time, not an event)."""
        while True:
            changed = self._rescheduled
            at: datetime | None = next_expiry(self._state.serving, self.clock.now())
            if at is None:
                await changed.wait()
                continue
            delay = (at - self.clock.now()).total_seconds()
            with anyio.move_on_after(max(delay, 0.0)) as timer:
                await changed.wait()
            if timer.cancelled_caught:
                self._publish()

    async def _report(self, session_id: str, healthy: bool, detail: str) -> None:
        endpoint_id = self._state.serving.replica_of.get(session_id)
        if endpoint_id is None:  # gone from the log since the table was made
            return
        e = stamp(
            ReplicaHealthReported,
            Provenance(self.name, self.clock.now()),
            router=self.router_id,
            endpoint_id=endpoint_id,
            session_id=session_id,
            healthy=healthy,
            detail=detail[:200],
        )
        await self.events.append(subj.route(self.router_id), e)
        log.info("router.health", router=self.router_id, session_id=session_id, healthy=healthy)

    async def _watch_stats(self, router: Router, told: dict[str, _Figures]) -> None:
        """Each route's traffic, sampled every ``sample_every_s``, reported over windows
        of ``stats_every_s`` when it changed, and at once when requests are found in
        flight where the last report had none (the first request at an endpoint with no
        replica wakes it: it must not wait out a window). At most two reports a window:
        another early one needs a report of none in flight first."""
        since: dict[str, tuple[int, float]] = {}  # requests_total, when: the window's start
        while True:
            await anyio.sleep(min(self.sample_every_s, self.stats_every_s))
            now = anyio.current_time()
            for eid, st in (await router.stats()).items():
                start = since.setdefault(eid, (st.requests_total, now))
                before = told.get(eid)
                began = st.in_flight + st.queued > 0 and (before is None or before[1] == 0)
                if now - start[1] < self.stats_every_s and not began:
                    continue
                since[eid] = (st.requests_total, now)
                e = self._stats_report(eid, st, start, now)
                if _figures(e) == before:
                    continue
                try:
                    await self.events.append(subj.route(self.router_id), e)
                except Exception as err:  # the next report says what is then
                    log.warning("router.stats_report_failed", endpoint_id=eid, error=repr(err))
                    continue
                told[eid] = _figures(e)

    def _stats_report(
        self, endpoint_id: str, st: RouteStats, start: tuple[int, float], now: float
    ) -> RouteStatsReported:
        """The window from ``start`` (requests counted then, and when) to ``now``, never
        shorter than ``stats_every_s`` (an early report spreads its requests over that,
        not over a moment: one request is no burst); a proxy restarted counts from zero."""
        requests = st.requests_total - start[0]
        if requests < 0:
            requests = st.requests_total
        return stamp(
            RouteStatsReported,
            Provenance(self.name, self.clock.now()),
            router=self.router_id,
            endpoint_id=endpoint_id,
            window_ms=round(max(now - start[1], self.stats_every_s) * 1000),
            requests=requests,
            in_flight=st.in_flight,
            queued=st.queued,
            p95_ms=None if st.p95_ms is None else round(st.p95_ms),
        )
