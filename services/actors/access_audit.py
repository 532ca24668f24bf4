"""A door's access audit: accesses told, written to the log off the caller's path.

``granted`` and ``refused`` never wait: the door answers its client at once. What the
limiter admits goes to a bounded queue that ``run`` drains onto ``fgpu.access.<door>``;
an access the queue cannot take (the log is slow or down) is counted like a suppressed
one, and the summaries go out when each window ends. A write that fails is logged and
dropped: the audit must never stop a door from answering.
"""

from collections import deque
from datetime import UTC, datetime

import anyio
import structlog
from anyio.abc import TaskStatus

from events import AccessGranted, AccessRefused, AccessSuppressed, AnyEvent, Door
from events import subjects as subj
from services.domain.access.access_audit import AccessLimiter, Suppressed
from services.domain.provenance import Provenance, stamp
from services.ports import Clock, EventLog, LogError

__all__ = ["AccessAudit"]

_QUEUE = 1000
log = structlog.get_logger()


class AccessAudit:
    """The audit of door ``via``, written as ``actor``."""

    def __init__(
        self,
        events: EventLog,
        clock: Clock,
        via: Door,
        actor: str,
        limiter: AccessLimiter | None = None,
    ) -> None:
        self.events = events
        self.clock = clock
        self.via: Door = via
        self.actor = actor
        self.limiter = limiter or AccessLimiter()
        self._queue: deque[AnyEvent] = deque()
        self._told = anyio.Event()

    def granted(self, owner: str, identity: str, client: str | None = None) -> None:
        self._tell(owner, False, AccessGranted, identity=identity, client=client)

    def refused(self, owner: str | None, what: str, reason: str, client: str | None = None) -> None:
        self._tell(owner or "", True, AccessRefused, what=what, reason=reason, client=client)

    def _tell(self, owner: str, refused: bool, kind: type[AnyEvent], **fields: object) -> None:
        owner = owner[:64]
        now = self.clock.now()
        admitted, due = self.limiter.admit(now.timestamp(), owner, refused=refused)
        self._summaries(due)
        if admitted:
            event = stamp(kind, Provenance(self.actor, now), via=self.via, owner=owner, **fields)
            if not self._put(event):
                self.limiter.count(owner, refused=refused)

    def _summaries(self, due: list[Suppressed]) -> None:
        for s in due:
            prov = Provenance(self.actor, self.clock.now())
            since = datetime.fromtimestamp(s.since, UTC)
            summary = stamp(
                AccessSuppressed,
                prov,
                via=self.via,
                owner=s.owner,
                since=since,
                granted=s.granted,
                refused=s.refused,
            )
            if not self._put(summary):
                log.warning("access.summary_lost", owner=s.owner, refused=s.refused)

    def _put(self, event: AnyEvent) -> bool:
        if len(self._queue) >= _QUEUE:
            return False
        self._queue.append(event)
        self._told.set()
        return True

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write what is told, and each window's summaries when it ends, until cancelled."""
        subject = subj.access(self.via)
        task_status.started()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._tick)
            while True:
                await self._told.wait()
                self._told = anyio.Event()
                while self._queue:
                    event = self._queue.popleft()
                    try:
                        await self.events.append(subject, event)
                    except LogError as e:
                        log.warning("access.not_written", error=str(e), kind=type(event).__name__)

    async def _tick(self) -> None:
        """Summaries are due when a window ends, even if nobody comes after it."""
        period = max(0.05, self.limiter.window_s / 4)
        while True:
            await anyio.sleep(period)
            self._summaries(self.limiter.due(self.clock.now().timestamp()))
