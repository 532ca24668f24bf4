"""The intake: the first reader of people's requests, and the only writer of them on the
log once there is tenancy.

It reads what people handed in (``IntakeQueue``), lets each key through at its rate
(``services.domain.intake``), and writes each request on its own subject of the log;
what it does not write
it counts, and says in one ``access.requests-dropped`` record per key and window. A
message is let go of (``done``) only once its requests are on the log, or counted as
dropped: one handed again after a crash is written again, and the log keeps one of each
(the stream's dedupe on the event's id), so nothing is lost and nothing doubled.

A message of one request is written pipelined with the others (a session asked for twice
is refused by the fold, a destroy asked twice answered once). One of several (``session
create --count N``), and an administrator's request, is one atomic batch, all or none,
expecting its first request's subject (a session's or an administrator's request: no
request stood there) to hold nothing: a failed write stores none of it, and a batch
written before (handed again, or sent again by its client with the same ids, however
long after) is refused whole by the log, which holds it already, and let go of. A client
that names a session it asked for before has the whole message refused so: the fold
would refuse that session's second request anyway.

One intake reads at a time in practice (a key's requests are written in the order it
handed them in only if one reader takes them); a second shares the work and is harmless.
"""

from contextlib import aclosing
from datetime import UTC, datetime

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from events import (
    AdminRequested,
    AnyEvent,
    RequestsDropped,
    SecretRemoved,
    SecretSet,
    ServeRequested,
    SessionRequested,
    decode_many,
)
from events import subjects as subj
from services.domain.intake import Dropped, Drops, KeyRates, routed
from services.domain.provenance import Provenance, stamp
from services.ports import (
    MAX_BATCH,
    Clock,
    ConcurrencyConflict,
    EventLog,
    Handed,
    IntakeQueue,
    LogError,
)

__all__ = ["IntakeActor"]

NAME = "intake"
log = structlog.get_logger()


class IntakeActor:
    def __init__(
        self,
        queue: IntakeQueue,
        events: EventLog,
        clock: Clock,
        *,
        rates: KeyRates | None = None,
        drops: Drops | None = None,
    ) -> None:
        self.queue = queue
        self.events = events
        self.clock = clock
        self.rates = KeyRates() if rates is None else rates
        self.drops = Drops() if drops is None else drops

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read and write for ever; started once it reads. A failing queue or log is
        logged and read again after a backoff: what was not let go of is handed again."""
        started = False
        backoff = 0.05
        while True:
            try:
                async with aclosing(self.queue.handed()) as batches:
                    async for batch in batches:
                        if not started:
                            task_status.started()
                            started = True
                        await self._take(batch)
                        await self._say_drops()
                        backoff = 0.05
            except LogError as e:
                log.warning("intake.broke", error=str(e), retry_s=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _now(self) -> float:
        return self.clock.now().timestamp()

    async def _take(self, batch: list[Handed]) -> None:
        """Write the requests of ``batch`` that may stand, in the order handed in (those
        handed alone pipelined, those handed together each an atomic batch: see the
        module), count the others dropped, then let the batch go. Raises LogError (the log
        failed: the batch is handed again later)."""
        now = self._now()
        loose: list[tuple[str, AnyEvent]] = []  # requests handed in alone
        for h in batch:
            route = self._judged(h, now)
            first_new = _first_new(route)
            if first_new is None:
                loose += route
                continue
            await self._append_many(loose)  # in the order handed in
            loose = []
            try:
                await self.events.append_batch(
                    route, expect_subject=first_new, expected_last_subject_seq=0
                )
            except ConcurrencyConflict as e:
                log.info("intake.written_before", owner=h.key, requests=len(route), said=str(e))
        await self._append_many(loose)
        for h in batch:
            await h.done()

    async def _append_many(self, route: list[tuple[str, AnyEvent]]) -> None:
        if route:
            # Each deduped by its id: written again after a crash, the log keeps one. (No
            # expected sequence: JetStream checks it before the id, so a create written
            # again would be refused as a conflict; the fold refuses a session id asked
            # for twice.)
            await self.events.append_many(route)

    def _judged(self, h: Handed, now: float) -> list[tuple[str, AnyEvent]]:
        """``h``'s requests with their subjects, if they may stand now; else none, and
        they are counted dropped."""
        # A key out of tokens costs no decoding: its flood is dropped at the cost of a count.
        if not self.rates.any_left(h.key, now):
            self.drops.rate_limited(h.key, 1, now)
            return []
        try:
            events = decode_many(h.data)
        except msgspec.MsgspecError as e:
            self.rates.take(h.key, 1, now)  # junk costs its sender too
            self.drops.refused(h.key, 1, f"not requests: {e}", now)
            return []
        route = routed(h.key, events)
        if isinstance(route, str):
            self.rates.take(h.key, 1, now)
            self.drops.refused(h.key, max(1, len(events)), route, now)
            return []
        if not self.rates.take(h.key, len(route), now):
            self.drops.rate_limited(h.key, len(route), now)
            return []
        return route

    async def _say_drops(self) -> None:
        for d in self.drops.due(self._now()):
            try:
                await self.events.append(subj.access("intake"), _record(d, self.clock))
            except LogError:
                self.drops.unsay(d)  # said again with the next window's
                raise


# A request applied again would change again (a secret's set: one more version): written
# expecting its own subject to be new, so one handed in twice is stored once, however late.
_ONCE = (AdminRequested, ServeRequested, SecretSet, SecretRemoved)


def _first_new(route: list[tuple[str, AnyEvent]]) -> str | None:
    """The subject of the first request of ``route`` if it stands on a subject of its own
    (a session asked for, an administrator's, serve or secret's request: its batch expects it to
    hold nothing, and stays in the order handed in) and ``route`` is several requests one
    atomic batch may hold, or one administrator's or serve request (the registrar or the
    serving actor would apply it again); else None (written pipelined)."""
    if not route or len(route) > MAX_BATCH:
        return None
    subject, first = route[0]
    if len(route) == 1:
        return subject if isinstance(first, _ONCE) else None
    return subject if isinstance(first, SessionRequested | AdminRequested) else None


def _record(d: Dropped, clock: Clock) -> RequestsDropped:
    return stamp(
        RequestsDropped,
        Provenance(NAME, clock.now()),
        owner=d.owner,
        since=datetime.fromtimestamp(d.since, UTC),
        rate_limited=d.rate_limited,
        refused=d.refused,
        reason=None if d.reason is None else d.reason[:500],
    )
