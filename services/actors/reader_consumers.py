"""Readers' consumers, kept as the tenancy says: one for each live reader keypair, none for
a revoked one. Run by the gatekeeper (its static user may make consumers; a reader may
not, so a reader cannot point one at another subject, widen its filter or touch anyone
else's).

It folds the tenancy ledger alone. A reader keypair made is given its consumer (on the
log for a reader of everything, on the domains' stream filtered to its domain for a
domain's reader); a reader keypair revoked loses it. Asking again is harmless (a consumer
there is kept, with its position; one gone is fine), so each gatekeeper of a queue group
may run one, and one that starts makes good what changed while none ran.
"""

from contextlib import aclosing

import anyio
import structlog
from anyio.abc import TaskStatus

from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold
from services.domain.tenancy.admin import reader_domain
from services.domain.tenancy.model import Tenancy
from services.ports import EventLog, LogError, ReaderConsumers

__all__ = ["ReaderConsumersActor", "wanted"]

log = structlog.get_logger()
_READER = "reader"


def wanted(t: Tenancy) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The readers' consumers the tenancy wants (live reader keys -> their domain, None:
    the whole log), and those it wants gone (revoked reader keys)."""
    live: dict[str, str | None] = {}
    gone: dict[str, str | None] = {}
    for key, kp in t.keypairs.items():
        if kp.service is None or kp.service.partition(":")[0] != _READER:
            continue
        (gone if kp.revoked else live)[key] = reader_domain(kp.service)
    return live, gone


class ReaderConsumersActor:
    def __init__(self, events: EventLog, consumers: ReaderConsumers) -> None:
        self.events = events
        self.consumers = consumers
        self.state = ClusterState()
        self._done: dict[str, bool] = {}  # reader key -> its consumer open (False: removed)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow the tenancy ledger for ever, keeping the consumers as it says; started
        once listening. A failing log or server is retried after a backoff."""
        started = False
        backoff = 0.05
        while True:
            try:
                tail = self.events.tail(self.state.last_seq, subject=subj.TENANCY)
                if not started:
                    task_status.started()
                    started = True
                async with aclosing(tail) as batches:
                    async for batch in batches:
                        fold(batch, self.state)
                        await self.reconcile()
                        backoff = 0.05
            except LogError as e:
                log.warning("reader_consumers.broke", error=str(e), retry_s=backoff)
                self._done.clear()  # asked again once back: asking is harmless
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def reconcile(self) -> None:
        """Open the consumers of live readers and close those of revoked ones, each once.
        Raises LogError."""
        live, gone = wanted(self.state.tenancy)
        for key, domain in live.items():
            if not self._done.get(key, False):
                await self.consumers.open(key, domain)
                self._done[key] = True
                log.info("reader_consumers.opened", reader=key, domain=domain)
        for key, domain in gone.items():
            if self._done.get(key, True):
                await self.consumers.close(key, domain)
                self._done[key] = False
                log.info("reader_consumers.closed", reader=key, domain=domain)
