"""The watcher beside a log's server: the room on its store's disk, said on the log, and
the server started again once it can write again.

Every ``every_s`` it measures the disk (``StoreDisk``) against the low-space watermark
(``services.domain.log_space``) and asks the server whether it failed to write for want
of room (``LogServer.write_error``), and keeps what it found (``current``: what the read
API serves, whatever the log can hold). What changes goes on the log
(``log.health`` on ``fgpu.health.<server>``): room under the watermark, so that the quota
actor admits no new session, and room again. A full disk stores nothing: that is said
once the server writes again, in the first record after, with since when it could not.

nats-server keeps a write error for good: once it failed to write for want of room it
fails every write until it starts again (nats-server 2.15.1, tried; its filestore keeps
the error). So once the disk has room above the watermark again the watcher starts the
server again on the same store (``LogServer.restart``), at most once every
``restart_every_s``; a server that exited is started again likewise. Clients reconnect
by themselves. Never below the watermark: a server started on a full disk cannot finish
an atomic batch it was writing when the disk filled, and drops the rest of it.
"""

from datetime import datetime

import anyio
import structlog
from anyio.abc import TaskStatus

from events import LogHealth, SpaceState
from events import subjects as subj
from services.domain.log_space import Watermark, reason, space_state
from services.domain.provenance import Provenance, stamp
from services.ports import Clock, EventLog, LogError, LogServer, ServerUnavailable, StoreDisk

__all__ = ["StoreWatch"]

NAME = "store-watch"
log = structlog.get_logger()


class StoreWatch:
    def __init__(
        self,
        events: EventLog,
        disk: StoreDisk,
        server: LogServer,
        clock: Clock,
        *,
        server_name: str,
        watermark: Watermark,
        every_s: float = 1.0,
        restart_every_s: float = 5.0,
    ) -> None:
        if not subj.is_token(server_name):
            raise ValueError(f"server name {server_name!r} must be a subject token")
        self.events = events
        self.disk = disk
        self.server = server
        self.clock = clock
        self.server_name = server_name
        self.watermark = watermark
        self.every_s = every_s
        self.restart_every_s = restart_every_s
        self.current: LogHealth | None = None  # what it found last
        self._said: SpaceState | None = None  # the state the log holds from it
        self._unwritable_since: datetime | None = None  # unsaid: the log could not hold it
        self._restarted_at: datetime | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Look every ``every_s``, for ever (ten times as often while what it found is not
        on the log yet: once a server writes again, requests handed in meanwhile reach
        the log as soon as their writers reconnect, and should find room said before
        them); started once it has looked once."""
        await self.check()
        task_status.started()
        while True:
            await anyio.sleep(self.every_s if self._settled() else self.every_s / 10)
            await self.check()

    def _settled(self) -> bool:
        now = self.current
        return now is None or (now.state is self._said and self._unwritable_since is None)

    async def check(self) -> LogHealth | None:
        """Look once: measure, start the server again if it is due, say what changed.
        What it found (also ``current``; None if the disk could not be measured). A
        failure of the log is left for the next look."""
        now = self.clock.now()
        try:
            usage = self.disk.usage()
        except OSError as e:
            log.warning("store_watch.unmeasured", path=self.disk.path, error=str(e))
            return None
        watermark = self.watermark.of(usage.total)
        failed = self.server.write_error()
        down = failed is not None or not self.server.running()
        if down and self._unwritable_since is None:
            self._unwritable_since = now
            log.error("store_watch.unwritable", path=self.disk.path, said=failed or "exited")
        if down and usage.free >= watermark and self._may_restart(now):
            failed = await self._restart(now)
        state = space_state(usage.free, watermark, unwritable=failed is not None)
        health = self._health(state, usage.free, usage.total, watermark, now)
        self.current = health
        if state is not SpaceState.FULL and (self._said != state or self._unwritable_since):
            await self._say(health)
        return health

    def _health(
        self, state: SpaceState, free: int, total: int, watermark: int, now: datetime
    ) -> LogHealth:
        return stamp(
            LogHealth,
            Provenance(NAME, now),
            server=self.server_name,
            path=self.disk.path,
            state=state,
            free_bytes=free,
            total_bytes=total,
            watermark_bytes=watermark,
            reason=reason(state, free, self.disk.path, watermark),
            unwritable_since=self._unwritable_since,
        )

    def _may_restart(self, now: datetime) -> bool:
        last = self._restarted_at
        return last is None or (now - last).total_seconds() >= self.restart_every_s

    async def _restart(self, now: datetime) -> str | None:
        """Start the server again; what it says of a write error after (None: none)."""
        self._restarted_at = now
        log.warning("store_watch.restarting", path=self.disk.path)
        try:
            await self.server.restart()
        except ServerUnavailable as e:
            log.error("store_watch.restart_failed", error=str(e))
        else:
            log.info("store_watch.restarted", path=self.disk.path)
        return self.server.write_error()

    async def _say(self, health: LogHealth) -> None:
        try:
            await self.events.append(subj.health(self.server_name), health)
        except LogError as e:
            log.info("store_watch.unsaid", state=health.state.value, error=str(e))
            return
        self._said = health.state
        self._unwritable_since = None
