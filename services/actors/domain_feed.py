"""The domain feed: each domain's part of the log, written for the domain's readers.

It folds the log and writes each record that belongs to a domain
(``services.domain.access.event_domains``) into the domains' stream, under
``fgpu.d.<domain>.<the record's subject>``, in the log's order; a reader keypair of that
domain reads it there, through a consumer whose filter is its domain's (made by the
gatekeeper: the reader cannot change it). It is a view, made again from the log at will.

A pipeline's records after its request (the actor's tasks asked for and ended, its
retries, its end) name only the run: the feed places them in the domain of the key that
asked for the run first (``runs``), as the pipeline actor lets the first request stand.

Where it stopped is the last record the domains' stream holds (the feed writes each
with the log's sequence); a feed that starts folds the log up to there and goes on from
the record after. A record written again after a crash is kept once (each is written
under an id of its domain and sequence). Nothing is decided here: it writes what the log
says, to whom it belongs.
"""

from contextlib import aclosing

import anyio
import structlog
from anyio.abc import TaskStatus

from events import AnyEvent, Malformed, PipelineRunRequested, Record, SessionRequested
from services.domain.access.event_domains import domains_of
from services.domain.fold.cluster import ClusterState
from services.domain.fold.id_set import IdSet
from services.domain.fold.state import clear_changes, evolve, forget_ended
from services.domain.status import ENDED
from services.domain.tenancy.admin import key_domain
from services.ports import DomainFeed, EventLog, LogError

__all__ = ["DomainFeedActor"]

NAME = "domain-feed"
log = structlog.get_logger()


class DomainFeedActor:
    def __init__(self, events: EventLog, feed: DomainFeed) -> None:
        self.events = events
        self.feed = feed
        self.state = ClusterState()
        # What the feed still needs of each session let go of (``_let_go``), for a record
        # that names it after its end: its domain (domain -> the ids of its sessions), and
        # its request (the ids of session and request, together). Digests, 16 bytes each:
        # the feed's memory follows live sessions, not history.
        self.ended: dict[str, IdSet] = {}
        self.ended_requests = IdSet()
        # The domain of each pipeline run (domain -> its runs' ids; "" for a run asked for
        # by a key of no domain, so that its first request still stands).
        self.runs: dict[str, IdSet] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write the domains' records for ever; started once it has caught up with where
        it stopped. A failing log or stream is read again after a backoff."""
        started = False
        backoff = 0.05
        while True:
            try:
                await self._resume()
                if not started:
                    task_status.started()
                    started = True
                async with aclosing(self.events.tail(self.state.last_seq)) as batches:
                    async for batch in batches:
                        await self._feed(batch)
                        backoff = 0.05
            except LogError as e:
                log.warning("domain_feed.broke", error=str(e), retry_s=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _resume(self) -> None:
        """The state of the log as it stood at the last record fed (the whole log folded
        up to there)."""
        last = await self.feed.last_fed()
        self.state = ClusterState()
        self.ended = {}
        self.ended_requests = IdSet()
        self.runs = {}
        if last == 0:
            return
        async with aclosing(self.events.read(0, until=last)) as batches:
            async for batch in batches:
                for r in batch:
                    self._note_run(r.event)
                    evolve(self.state, r)
                self._let_go()

    async def _feed(self, batch: list[Record]) -> None:
        """Fold ``batch``, writing each record to the domains it belongs to."""
        out: list[tuple[str, Record]] = []
        for r in batch:
            if r.seq <= self.state.last_seq:
                continue
            if isinstance(r.event, Malformed):
                evolve(self.state, r)
                continue
            self._note_run(r.event)
            before = self._domains(r.event)
            evolve(self.state, r)
            if r.seq in self.state.malformed:
                continue  # the fold refused it (a subject not its own): nobody's record
            for domain in sorted(before | self._domains(r.event)):
                out.append((domain, r))
        self._let_go()
        if out:
            await self.feed.feed(out)

    def _note_run(self, e: object) -> None:
        """Keep the domain of a run's first request (before the record is placed, so the
        request and the records after it go to the same domain)."""
        if isinstance(e, PipelineRunRequested) and self._run_domain(e.run_id) is None:
            domain = key_domain(self.state.tenancy, e.requester) or ""
            self.runs.setdefault(domain, IdSet()).add(e.run_id)

    def _run_domain(self, run_id: str) -> str | None:
        return next((d for d, ids in self.runs.items() if run_id in ids), None)

    def _domains(self, e: AnyEvent) -> frozenset[str]:
        """``domains_of`` as if the state still held every session it let go of, and with
        the domain of the pipeline run a record names."""
        found = domains_of(self.state, e)
        run = getattr(e, "run_id", None)
        if isinstance(run, str) and not isinstance(e, PipelineRunRequested):
            domain = self._run_domain(run)
            if domain:
                found = found | {domain}
        sid = getattr(e, "session_id", None)
        if not isinstance(sid, str) or sid in self.state.sessions:
            return found  # live, or never let go of: domains_of knows
        gone = next((d for d, ids in self.ended.items() if sid in ids), None)
        if gone is None:
            return found
        # A request names a session it did not make (an id taken already): it is its
        # sender's alone, as domains_of says.
        if isinstance(e, SessionRequested) and _made(sid, e.id) not in self.ended_requests:
            return found
        return found | {gone}

    def _let_go(self) -> None:
        """Let go of the sessions that ended (``forget_ended``), keeping each one's domain,
        and of the fold's notes of what changed, which only actors that react read: the
        feed's memory follows live sessions, not history, and it places every record as
        with the whole fold."""
        s = self.state
        for sid in s.changed:
            v = s.sessions.get(sid)
            if v is not None and v.status in ENDED and v.user is not None:
                self.ended.setdefault(v.domain, IdSet()).add(sid)
                self.ended_requests.add(_made(sid, v.request_id))
        forget_ended(s, s.changed)
        clear_changes(s)


def _made(session_id: str, request_id: str) -> str:
    """The key of "``request_id`` made ``session_id``" in ``ended_requests``."""
    return f"{session_id}\0{request_id}"
