"""The gatekeeper: decides who may connect to the bus, and with which permissions.

The server asks it about every connection but its own static users (the auth callout):
an access key and a secret. It folds the tenancy ledger (``fgpu.tenancy``) and nothing
else of the log, so it knows each keypair and the salted hash of its secret, whose user
it is and the user's role, or which service it is of; it answers with that identity's
concrete permissions (``services.domain.access.permissions``), or a refusal.

Revocation: from the moment a keypair's revocation (or its user's removal) is folded, the
key is refused; then the servers are asked which connections the key holds (they know
each connection by its access key, wherever it is and whoever let it in) and told to
end them, and asked again until none is left (``Kicker``): a client reconnecting meanwhile
was let in by a gatekeeper that had not folded the revocation yet. Nothing of the
connections is remembered here. A gatekeeper that starts (or starts again) ends, once it
has read the ledger, whatever connection the servers still hold of a key no longer alive:
one let in before a revocation no gatekeeper was running to see.

Checking a secret costs the scrypt work by design; a secret once checked is remembered
(its SHA-256, in memory) for as long as the keypair lives, so that a reconnecting client
does not pay it again. Wrong secrets are throttled per key (``SecretChecks``): a key that
keeps failing is refused for a while without a check.
"""

from collections.abc import Sequence
from contextlib import aclosing
from functools import partial

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from events import AdminApplied, Record, RemoveUser, RevokeKeypair
from events import subjects as subj
from services.actors.access_audit import AccessAudit
from services.domain.access.keys import secret_matches
from services.domain.access.permissions import service_permissions, user_permissions
from services.domain.access.throttle import SecretChecks
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold
from services.domain.tenancy.model import Tenancy
from services.ports import Clock, ConnectionsUnknown, EventLog, Grant, Kicker, LogError

__all__ = ["GatekeeperActor"]

NAME = "gatekeeper"
USER_GRANT_S = 12 * 3600  # a person's connection is let in for this long at most
_CATCH_UP_S = 1.0  # how long an unknown key waits for the fold to reach the log's end
# A key's connections are asked for and ended in rounds, each but the first after a pause
# (doubling): at most this many, about 6 s of pauses in all, then what is left is logged.
_ROUNDS = 8
_FIRST_PAUSE_S = 0.05
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
        self._folded = anyio.Event()
        self._seen = 0  # records of the ledger folded
        self._tg: TaskGroup | None = None  # where keys' connections are ended
        self._ending: set[str] = set()  # keys whose connections are being ended now
        # Until the ledger is read: the keys it revokes are ended by the sweep after.
        self._catching_up = True

    async def run(
        self, *, task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow the tenancy ledger for ever; started once it has read every record the
        ledger held when it started.

        The ledger alone (``fgpu.tenancy``), not the whole log: who may connect is all
        the gatekeeper decides, so its work and memory follow the tenancy, not the
        sessions (folding every session's events cost the schedule path a tenth of its
        throughput on a 2-core machine: bench/tenancy.py). Connections are ended in
        tasks of their own: the fold never waits on the servers."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await self._follow(task_status)

    async def _follow(self, task_status: TaskStatus[ClusterState]) -> None:
        backoff = 0.05
        while True:  # the log may not be there yet (a server just started, no stream)
            try:
                target = await self.events.count(subj.TENANCY)
                break
            except LogError as e:
                log.warning("gatekeeper.log_not_ready", error=str(e), retry_s=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        started = target == 0
        if started:
            self._started(task_status)
        backoff = 0.05
        while True:
            try:
                tail = self.events.tail(self.state.last_seq, subject=subj.TENANCY)
                async with aclosing(tail) as batches:
                    async for batch in batches:
                        fold(batch, self.state)
                        self._seen += len(batch)
                        await self.react(self.state, _ended(batch, self.state.tenancy))
                        if not started and self._seen >= target:
                            self._started(task_status)
                            started = True
                        backoff = 0.05
            except LogError as e:
                log.warning("gatekeeper.tail_broke", error=str(e), retry_s=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _started(self, task_status: TaskStatus[ClusterState]) -> None:
        assert self._tg is not None
        task_status.started(self.state)
        self._catching_up = False
        self._tg.start_soon(self._sweep)

    async def react(self, s: ClusterState, ended: Sequence[str] = ()) -> None:
        """Take ``s`` as the tenancy now; end the connections of the keys ``ended`` (those
        the last batch revoked), once started."""
        self.state = s
        self._folded.set()
        self._folded = anyio.Event()
        for access_key in ended:
            self._secrets.forget(access_key)
            if not self._catching_up:
                self._end_soon(access_key)

    async def authorize(self, access_key: str, secret: str) -> Grant | str:
        """Let ``access_key`` in (a Grant), or why not (a refusal); either is told to the
        access audit."""
        answer = await self._authorize(access_key, secret)
        if self.audit is not None:
            if isinstance(answer, Grant):
                self.audit.granted(access_key, answer.name)
            else:
                self.audit.refused(access_key, "connect", answer)
        return answer

    async def _authorize(self, access_key: str, secret: str) -> Grant | str:
        if access_key not in self.state.tenancy.keypairs:
            await self._caught_up()  # a keypair just made may not be folded yet
        kp = self.state.tenancy.keypairs.get(access_key)
        if kp is None or kp.revoked:
            return f"access key {access_key!r} is unknown or revoked"
        refused = await self._secret_refusal(access_key, secret, kp.secret_hash)
        if refused is not None:
            return refused
        return self._grant(access_key)

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

    def key_of(self, name: str) -> str | None:
        """The access key of a connection the servers know by ``name`` (what they name it
        in their logs), if it is one the ledger holds: a client the gatekeeper let in is
        named by its key."""
        return name if name in self.state.tenancy.keypairs else None

    def _alive(self, access_key: str) -> bool:
        t = self.state.tenancy
        kp = t.keypairs.get(access_key)
        if kp is None or kp.revoked:
            return False
        return kp.service is not None or t.user_of(access_key) is not None

    async def _sweep(self) -> None:
        """End every connection the servers hold of a keypair no longer alive (revoked
        while no gatekeeper ran), asking until the servers answer."""
        backoff = 0.05
        while True:
            try:
                held = await self.kicker.held()
                break
            except ConnectionsUnknown as e:
                log.warning("gatekeeper.connections_unknown", error=str(e), retry_s=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        keypairs = self.state.tenancy.keypairs
        for name in set(held.values()):
            if name in keypairs and not self._alive(name):
                self._end_soon(name)

    def _end_soon(self, access_key: str) -> None:
        assert self._tg is not None
        if access_key not in self._ending:
            self._ending.add(access_key)
            self._tg.start_soon(self._end, access_key)

    async def _end(self, access_key: str) -> None:
        """End every connection the servers hold of ``access_key``, asking again after
        each round until none is left, ``_ROUNDS`` at most."""
        pause = _FIRST_PAUSE_S
        try:
            for round_ in range(_ROUNDS):
                if round_:
                    await anyio.sleep(pause)
                    pause *= 2
                try:
                    held = await self.kicker.held(access_key)
                except ConnectionsUnknown as e:
                    log.warning(
                        "gatekeeper.connections_unknown", access_key=access_key, error=str(e)
                    )
                else:
                    if not held:
                        return
                    log.info("gatekeeper.kick", access_key=access_key, connections=len(held))
                    await self.kicker.kick(held)
            log.error("gatekeeper.connections_left", access_key=access_key, rounds=_ROUNDS)
        finally:
            self._ending.discard(access_key)


def _ended(batch: Sequence[Record], t: Tenancy) -> list[str]:
    """The access keys ``batch`` (folded into ``t``) revoked: itself, or by removing
    their user."""
    keys: list[str] = []
    for r in batch:
        match r.event:
            case AdminApplied(command=RevokeKeypair(access_key=key)):
                keys.append(key)
            case AdminApplied(command=RemoveUser(user=name)):
                keys += [k for k, kp in t.keypairs.items() if kp.user == name]
    return keys
