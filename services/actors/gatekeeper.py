"""The gatekeeper: decides who may connect to the bus, and with which permissions.

The server asks it about every connection but its own static users (the auth callout):
an access key and a secret. It folds the tenancy ledger (``fgpu.tenancy``) and nothing
else of the log, so it knows each keypair and the salted hash of its secret, whose user
it is and the user's role, or which service it is of; it answers with that identity's
concrete permissions (``services.domain.permissions``), or a refusal. It remembers each
connection it let in, and when a keypair is revoked or its user removed, it disconnects
them (``Kicker``): a revocation takes effect within a batch of the log, with nothing
restarted.

Checking a secret costs the scrypt work by design; a secret once checked is remembered
(its SHA-256, in memory) for as long as the keypair lives, so that a reconnecting client
does not pay it again. Wrong secrets are throttled per key (``SecretChecks``): a key that
keeps failing is refused for a while without a check.
"""

from collections import defaultdict
from contextlib import aclosing
from functools import partial

import anyio
import structlog
from anyio.abc import TaskStatus

from events import subjects as subj
from services.actors.access_audit import AccessAudit
from services.domain.keys import secret_matches
from services.domain.permissions import service_permissions, user_permissions
from services.domain.state import ClusterState, fold
from services.domain.throttle import SecretChecks
from services.ports import Clock, Connection, EventLog, Grant, Kicker, LogError

__all__ = ["GatekeeperActor"]

NAME = "gatekeeper"
USER_GRANT_S = 12 * 3600  # a person's connection is let in for this long at most
_CATCH_UP_S = 1.0  # how long an unknown key waits for the fold to reach the log's end
_REMEMBERED = 1000  # connections remembered per access key
log = structlog.get_logger()


class GatekeeperActor:
    def __init__(
        self,
        events: EventLog,
        kicker: Kicker,
        clock: Clock,
        *,
        audit: AccessAudit | None = None,
    ) -> None:
        self.events = events
        self.audit = audit
        self.kicker = kicker
        self.clock = clock
        self.state = ClusterState()
        self._secrets = SecretChecks()
        # Connections let in, by access key; the latest few: kicking one gone is harmless.
        self._connections: dict[str, dict[Connection, None]] = defaultdict(dict)
        self._folded = anyio.Event()
        self._seen = 0  # records of the ledger folded

    async def run(
        self, *, task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow the tenancy ledger for ever; started once it has read every record the
        ledger held when it started.

        The ledger alone (``fgpu.tenancy``), not the whole log: who may connect is all
        the gatekeeper decides, so its work and memory follow the tenancy, not the
        sessions (folding every session's events cost the schedule path a tenth of its
        throughput on a 2-core machine: bench/tenancy.py)."""
        backoff = 0.05
        while True:  # the log may not be there yet (a server just started, no stream)
            try:
                target = await self.events.count(subj.TENANCY)
                break
            except LogError as e:
                log.warning("gatekeeper.log_not_ready", error=str(e), retry_s=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        started = False
        if target == 0:
            task_status.started(self.state)
            started = True
        backoff = 0.05
        while True:
            try:
                tail = self.events.tail(self.state.last_seq, subject=subj.TENANCY)
                async with aclosing(tail) as batches:
                    async for batch in batches:
                        fold(batch, self.state)
                        self._seen += len(batch)
                        await self.react(self.state)
                        if not started and self._seen >= target:
                            task_status.started(self.state)
                            started = True
                        backoff = 0.05
            except LogError as e:
                log.warning("gatekeeper.tail_broke", error=str(e), retry_s=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def react(self, s: ClusterState) -> None:
        self.state = s
        self._folded.set()
        self._folded = anyio.Event()
        await self._disconnect_revoked()

    async def authorize(self, access_key: str, secret: str, connection: Connection) -> Grant | str:
        """Let ``access_key`` in on ``connection`` (a Grant), or why not (a refusal); either
        is told to the access audit."""
        answer = await self._authorize(access_key, secret, connection)
        if self.audit is not None:
            if isinstance(answer, Grant):
                self.audit.granted(access_key, answer.name)
            else:
                self.audit.refused(access_key, "connect", answer)
        return answer

    async def _authorize(self, access_key: str, secret: str, connection: Connection) -> Grant | str:
        if access_key not in self.state.tenancy.keypairs:
            await self._caught_up()  # a keypair just made may not be folded yet
        t = self.state.tenancy
        kp = t.keypairs.get(access_key)
        if kp is None or kp.revoked:
            return f"access key {access_key!r} is unknown or revoked"
        refused = await self._secret_refusal(access_key, secret, kp.secret_hash)
        if refused is not None:
            return refused
        grant = self._grant(access_key)
        if isinstance(grant, Grant):
            known = self._connections[access_key]
            known[connection] = None
            if len(known) > _REMEMBERED:
                del known[next(iter(known))]
        return grant

    def _grant(self, access_key: str) -> Grant | str:
        t = self.state.tenancy
        kp = t.keypairs[access_key]
        if kp.service is not None:
            permissions = service_permissions(access_key, kp.service)
            if permissions is None:
                return f"access key {access_key} is of no service this version knows"
            return Grant(f"service:{kp.service}", permissions, None)
        user = t.user_of(access_key)
        if user is None:
            return f"the user of access key {access_key} was removed"
        expires = int(self.clock.now().timestamp()) + USER_GRANT_S
        return Grant(f"user:{user.user}", user_permissions(access_key, user.role), expires)

    async def _secret_refusal(self, access_key: str, secret: str, kept: str) -> str | None:
        """Why ``secret`` is refused for ``access_key`` (None: it is right): the scrypt
        check runs once per right secret, and not at all for a throttled key."""
        return await self._secrets.refusal(
            access_key,
            secret,
            self.clock.now().timestamp(),
            partial(anyio.to_thread.run_sync, secret_matches, secret, kept),
        )

    async def _caught_up(self) -> None:
        """Wait, briefly, until the fold holds every record the ledger held when asked."""
        with anyio.move_on_after(_CATCH_UP_S):
            end = await self.events.count(subj.TENANCY)
            while self._seen < end:
                await self._folded.wait()

    def key_of(self, client_id: int) -> str | None:
        """The access key connection ``client_id`` (the server's cid) was let in with, if
        it is remembered. On a cluster of servers a cid names a connection per server:
        the first remembered wins."""
        for access_key, connections in self._connections.items():
            if any(c.client_id == client_id for c in connections):
                return access_key
        return None

    def _alive(self, access_key: str) -> bool:
        t = self.state.tenancy
        kp = t.keypairs.get(access_key)
        if kp is None or kp.revoked:
            return False
        return kp.service is not None or t.user_of(access_key) is not None

    async def _disconnect_revoked(self) -> None:
        for access_key in [k for k in self._connections if not self._alive(k)]:
            connections = self._connections.pop(access_key)
            self._secrets.forget(access_key)
            for c in connections:
                log.info("gatekeeper.kick", access_key=access_key, client=c.client_id)
                await self.kicker.kick(c)
