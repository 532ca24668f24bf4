"""The scheduler actor: keeps the PENDING queue, places sessions, answers destroys.

Each resource group's queue is taken in its order (priority, then FIFO, LIFO or DRF) and
placed on its agents only, under its policy (``services.domain.scheduling.schedule_round``). A round
runs whenever the log moves, so a session is re-tried whenever capacity frees, with
nobody doing anything. A session that does not fit now is skipped (backfill), and the
rest of the queue still gets its chance: one big session never blocks small ones behind
it. Since nothing frees within a round, a round looks at the head of each shape's queue
only: its cost is the shapes and the placements, not the queue's length. Time limits
(pending timeouts, lifetimes, idleness) are also looked at as time passes.

Only one scheduler acts, even if two run by mistake: every decision is appended to the
one ledger subject ``fgpu.sched`` in an atomic batch that expects the ledger's last
sequence. A scheduler whose view is stale gets a conflict, stores nothing, rebuilds its
state from the log and decides again; it can never place on a share another took.
"""

import time
from collections.abc import Callable
from datetime import datetime

import anyio
import structlog

from events import (
    AgentHeard,
    AgentLost,
    AnyEvent,
    DestroyRejected,
    GroupSettings,
    SessionCancelled,
    SessionDestroyRequested,
    SessionLost,
    SessionTerminating,
    SessionType,
    SessionUnplaced,
)
from events import subjects as subj
from services.actors.common import LogActor, Provenance, append_expecting, stamp
from services.actors.snapshots import Snapshots
from services.domain.durations import before
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import apply_decision, running_at
from services.domain.records import SessionView
from services.domain.scheduling.placement import DEFAULT_POLICY, PlacementPolicy
from services.domain.scheduling.placement import policy as placement_policy
from services.domain.scheduling.schedule_round import NAME, GroupRound, overdue
from services.domain.status import ENDED, SessionStatus
from services.domain.tenancy.groups import lifetime_of, settings_of
from services.ports import Clock, EventLog, LogError

__all__ = ["SchedulerActor"]

log = structlog.get_logger()
_MAX_DECISIONS = 1000  # the server's largest atomic batch

S = SessionStatus


class SchedulerActor(LogActor):
    """Also watches agents' heartbeats: ``heard(agent_id)`` for each one received, and an
    agent silent for ``lost_after_s`` is declared lost (nothing new is placed there).

    An agent counts as alive only once heard from since this scheduler started (a
    heartbeat, or a registration it folded after its rebuild): an agent gone long before
    a restart gets nothing placed on it, not even for ``lost_after_s``. When an agent is
    lost, the sessions placed there that it never started are placed again at once
    (``session.unplaced``); those it had started end ERROR after ``lost_grace_s``
    (``session.lost``), their shares freed. Each is an event with its reason.
    """

    NAME = NAME

    def __init__(
        self,
        events: EventLog,
        clock: Clock,
        *,
        durable: str | None = None,
        lost_after_s: float = 15.0,
        lost_grace_s: float = 600.0,
        reserve_after_s: float = 300.0,
        policy: str = DEFAULT_POLICY,
        pending_timeout_s: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        snapshots: Snapshots | None = None,
    ) -> None:
        super().__init__(events, clock, durable=durable, snapshots=snapshots)
        self.lost_after_s = lost_after_s
        self.lost_grace_s = lost_grace_s
        self.rebuilt_seq: int | None = None  # the log's end when this scheduler rebuilt
        self.reserve_after_s = reserve_after_s
        placement_policy(policy)  # UnknownPolicy for a name there is not
        # The default group's settings until an administrator gives it some.
        self.fallback = GroupSettings(policy=policy, pending_timeout_s=pending_timeout_s)
        self._policies: dict[tuple[str, str], PlacementPolicy] = {}
        self.monotonic = monotonic
        self.last_heard: dict[str, float] = {}
        self.since = monotonic()
        self.state: ClusterState | None = None
        self._lock = anyio.Lock()

    def heard(self, agent_id: str) -> None:
        self.last_heard[agent_id] = self.monotonic()

    async def check_liveness(self) -> None:
        """Declare lost every registered agent not heard from for ``lost_after_s``.

        Applied only once on the log: if the append fails, the next check tries again.
        """
        s = self.state
        if s is None:
            return
        async with self._lock:
            now = self.monotonic()
            out: list[AnyEvent] = []
            for agent_id, a in s.agents.items():
                heard = self.last_heard.get(agent_id, self.since)
                if not a.lost and now - heard > self.lost_after_s:
                    lost = stamp(
                        AgentLost,
                        Provenance(NAME, self.clock.now()),
                        agent_id=agent_id,
                        reason=f"no heartbeat for {now - heard:.0f} s",
                    )
                    out.append(lost)
            # Agents lost in an earlier check: their sessions (independent decisions, each
            # about one session of one lost agent).
            out += self._of_lost_agents(s)
            out += self._newly_heard(s)
            out += self._over_time(s)
            # One atomic batch at most: what is left over is decided again next check.
            out = out[:_MAX_DECISIONS]
            if not out:
                return
            try:
                await self._append(s, out)
            except LogError as err:
                log.warning("scheduler.liveness_not_appended", error=str(err))
                return  # nothing applied: the next check decides again
            for e in out:
                apply_decision(s, e)

    def _of_lost_agents(self, s: ClusterState) -> list[AnyEvent]:
        """Placements on lost agents taken back, and sessions they ran past the grace
        ended (not applied yet)."""
        now = self.clock.now()
        out: list[AnyEvent] = []
        for a in s.agents.values():
            if not a.lost or not a.sessions:
                continue
            over = a.lost_at is not None and (now - a.lost_at).total_seconds() >= self.lost_grace_s
            for session_id in list(a.sessions):
                v = s.sessions[session_id]
                kind: type[SessionUnplaced] | type[SessionLost]
                if v.status is S.SCHEDULED:
                    kind = SessionUnplaced
                    reason = f"agent {a.agent_id} was lost before it started the session"
                elif over:
                    kind = SessionLost
                    reason = f"agent lost: {a.agent_id} not heard from for {self.lost_grace_s:g} s"
                else:
                    continue
                e = stamp(
                    kind,
                    Provenance(NAME, now, None, v.correlation_id),
                    session_id=session_id,
                    owner=v.owner,
                    agent_id=a.agent_id,
                    reason=reason,
                )
                out.append(e)
        return out

    def _over_time(self, s: ClusterState) -> list[AnyEvent]:
        """Sessions past a time limit of their group (not applied yet): pending ones past
        the pending timeout cancelled, running ones past their lifetime or idle past the
        idle timeout stopped, each with its reason. A round looks at pending timeouts only
        when the log moves; this looks at every limit as time passes."""
        now = self.clock.now()
        out: list[AnyEvent] = []
        for group in s.queue.groups():
            limit = self.settings(s, group).pending_timeout_s
            if limit is None:
                continue
            for e in overdue(s, group, limit, now, _outside(s, group)):
                out.append(e)
                if len(out) >= _MAX_DECISIONS:
                    return out
        # Running sessions: only those a limit may have fallen due for, as the fold keeps
        # them by when their limits count from (``running_index``), not every one.
        due: dict[str, None] = dict.fromkeys(s.running.own_lifetime_out(now))
        for group in s.running.groups():
            settings = self.settings(s, group)
            lifetime = lifetime_of(settings, None)
            if lifetime is not None:
                due.update(dict.fromkeys(s.running.started_by(group, before(now, lifetime))))
            idle = settings.idle_timeout_s
            if idle is not None:
                due.update(dict.fromkeys(s.running.idle_since(group, before(now, idle))))
        for session_id in sorted(due, key=lambda sid: s.sessions[sid].arrival_seq):
            v = s.sessions[session_id]
            a = s.agents.get(v.agent_id or "")
            if a is None or a.lost:  # its sessions end by the lost agent's grace
                continue
            why = self._why_stop(v, self.settings(s, v.group), now)
            if why is not None:
                prov = Provenance(NAME, now, v.request_id, v.correlation_id)
                e = stamp(
                    SessionTerminating,
                    prov,
                    session_id=session_id,
                    agent_id=a.agent_id,
                    reason=why,
                )
                out.append(e)
        return out

    @staticmethod
    def _why_stop(v: SessionView, settings: GroupSettings, now: datetime) -> str | None:
        """Why a running session must stop now (its lifetime, or idle), if it must."""
        lifetime = lifetime_of(settings, v.lifetime_s)
        started = running_at(v)
        if lifetime is not None and (now - started).total_seconds() >= lifetime:
            return f"lifetime of {lifetime} s reached"
        idle = settings.idle_timeout_s
        active = v.active_at or started
        interactive = v.session_type is SessionType.INTERACTIVE
        if interactive and idle is not None and (now - active).total_seconds() >= idle:
            return (
                f"idle for {idle} s (resource group {v.group}): no kernel launch, "
                "no GPU memory in use, no CPU used"
            )
        return None

    def _unheard(self, s: ClusterState) -> frozenset[str]:
        """Agents not known alive since this scheduler started (no registration nor
        ``agent.heard`` after its rebuild): nothing is placed there. A scheduler that never
        rebuilt (deciding on a state handed to it) heard every registration as it came."""
        since = self.rebuilt_seq if self.rebuilt_seq is not None else 0
        if since == 0:  # every agent on the log was registered at a sequence above it
            return frozenset()
        return frozenset(
            agent_id
            for agent_id, a in s.agents.items()
            if max(a.registered_seq, a.heard_seq) <= since
        )

    def _newly_heard(self, s: ClusterState) -> list[AnyEvent]:
        """``agent.heard`` for each agent known only from before this scheduler started
        that it has now heard beat: folded back, it counts as alive, and the round it
        wakes places what waited for it."""
        out: list[AnyEvent] = []
        for agent_id in self._unheard(s):
            if agent_id in self.last_heard and not s.agents[agent_id].lost:
                prov = Provenance(NAME, self.clock.now())
                out.append(stamp(AgentHeard, prov, agent_id=agent_id))
        return out

    async def react(self, s: ClusterState) -> None:
        if self.rebuilt_seq is None:
            self.rebuilt_seq = s.last_seq  # the first call is right after the rebuild
        self.state = s
        async with self._lock:
            while True:
                decisions = self.decide(s)
                if not decisions:
                    return
                await self._append(s, decisions)
                if len(decisions) < _MAX_DECISIONS:
                    return

    async def _append(self, s: ClusterState, decisions: list[AnyEvent]) -> None:
        items = [(subj.LEDGER, d) for d in decisions]
        await append_expecting(self.events, s, subj.LEDGER, items)

    def decide(self, s: ClusterState) -> list[AnyEvent]:
        """This round's decisions, already applied to ``s`` (see ``apply_decision``)."""
        now = self.clock.now()
        out: list[AnyEvent] = []

        def emit(e: AnyEvent) -> None:
            apply_decision(s, e)
            out.append(e)

        for request in list(s.destroys.values()):
            if len(out) >= _MAX_DECISIONS:
                return out
            emit(self._answer_destroy(s, request))
        unheard = self._unheard(s)
        for group in s.queue.groups():
            if len(out) >= _MAX_DECISIONS:
                break
            settings = self.settings(s, group)
            GroupRound(
                s=s,
                group=group,
                settings=settings,
                place=self._policy(group, settings.policy),
                excluded=unheard | _outside(s, group),
                now=now,
                emit=emit,
                out=out,
                budget=_MAX_DECISIONS,
                reserve_after_s=self.reserve_after_s,
            ).run()
        return out

    def settings(self, s: ClusterState, group: str) -> GroupSettings:
        """What ``group``'s sessions run under (the scheduler's own for a default group
        never given settings)."""
        return settings_of(s.tenancy.groups, group, self.fallback)

    def _policy(self, group: str, name: str) -> PlacementPolicy:
        """One policy object per group and name: a policy's cache is of what it saw."""
        key = (group, name)
        found = self._policies.get(key)
        if found is None:
            found = self._policies[key] = placement_policy(name)
        return found

    def _answer_destroy(self, s: ClusterState, d: SessionDestroyRequested) -> AnyEvent:
        v = s.sessions.get(d.session_id)
        prov = Provenance(NAME, self.clock.now(), d.id, d.correlation_id or d.id)
        refuse = None
        if v is None and d.session_id in s.ended:
            refuse = "the session already ended"
        elif v is None:
            refuse = "no such session"
        elif v.owner != d.requester:
            refuse = "the session belongs to another access key"
        elif v.status in ENDED:
            refuse = f"the session already ended ({v.status})"
        elif v.status is S.TERMINATING:
            refuse = "the session is already terminating"
        if refuse is not None or v is None:
            return stamp(
                DestroyRejected,
                prov,
                session_id=d.session_id,
                requester=d.requester,
                reason=refuse or "no such session",
            )
        if v.status in (S.REQUESTED, S.PENDING):
            return stamp(
                SessionCancelled,
                prov,
                session_id=v.session_id,
                owner=v.owner,
                reason=f"destroyed by {d.requester} before it started",
            )
        return stamp(
            SessionTerminating,
            prov,
            session_id=v.session_id,
            agent_id=v.agent_id or "",
            reason=f"destroyed by {d.requester}",
        )


def _outside(s: ClusterState, group: str) -> frozenset[str]:
    """The agents of every other group: nothing of ``group`` goes there."""
    return frozenset(agent_id for agent_id, a in s.agents.items() if a.group != group)
