"""The scheduler actor: keeps the PENDING queue, places sessions, answers destroys.

Queue order is priority (higher first), then arrival on the log. Each round tries every
queued session in that order against the state folded from the log, so a session is
re-tried whenever capacity frees, with nobody doing anything. A session that does not fit
now is skipped (backfill), and the rest of the queue still gets its chance: one big
session never blocks small ones behind it, and a failure of one never skips the others.

Only one scheduler acts, even if two run by mistake: every decision is appended to the
one ledger subject ``fgpu.sched`` in an atomic batch that expects the ledger's last
sequence. A scheduler whose view is stale gets a conflict, stores nothing, rebuilds its
state from the log and decides again; it can never place on a share another took.
"""

import time
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
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
    SessionQueued,
    SessionRejected,
    SessionScheduled,
    SessionTerminating,
    SessionType,
    SessionUnplaced,
    Slots,
)
from events import subjects as subj
from services.actors.common import LogActor, Provenance, append_expecting, stamp
from services.actors.snapshots import Snapshots
from services.domain.allocator import Placement, Refusal, never_fits
from services.domain.groups import DEFAULT_GROUP, lifetime_of, settings_of
from services.domain.images import pullers
from services.domain.placement import DEFAULT_POLICY, PlacementPolicy
from services.domain.placement import policy as placement_policy
from services.domain.queue_order import queue_order
from services.domain.resources import format_fgpu, format_slots
from services.domain.state import ENDED_STUB, ClusterState, SessionView, apply_decision
from services.domain.status import ENDED, SessionStatus
from services.ports import Clock, EventLog, LogError

__all__ = ["SchedulerActor"]

NAME = "scheduler"
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
        settings = {g: self.settings(s, g) for g in {*s.tenancy.groups, DEFAULT_GROUP}}
        out: list[AnyEvent] = []
        if any(g.pending_timeout_s for g in settings.values()):
            for session_id in s.queue:
                v = s.sessions[session_id]
                limit = self.settings(s, v.group).pending_timeout_s
                if limit is not None and (now - _admitted_at(v)).total_seconds() >= limit:
                    prov = Provenance(NAME, now, v.request_id, v.correlation_id)
                    out.append(self._cancel_pending(s, v, limit, prov))
        timed = (
            g.default_lifetime_s or g.max_lifetime_s or g.idle_timeout_s for g in settings.values()
        )
        if not any(timed):
            return out
        for a in s.agents.values():
            for session_id in a.sessions:
                v = s.sessions[session_id]
                why = (
                    self._why_stop(v, self.settings(s, v.group), now)
                    if v.status is S.RUNNING
                    else None
                )
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
        started = _running_at(v)
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
        for group, queue in self._queues(s).items():
            if len(out) >= _MAX_DECISIONS:
                break
            settings = self.settings(s, group)
            excluded = unheard | _outside(s, group)
            order = queue_order(s, group, queue, settings.queue)
            self._decide_group(s, group, settings, order, excluded, now, emit, out)
        return out

    def _queues(self, s: ClusterState) -> dict[str, list[str]]:
        """The pending sessions of each group, groups by name (every scheduler of one log
        goes through them alike)."""
        queues: dict[str, list[str]] = {}
        for session_id in s.queue:
            queues.setdefault(s.sessions[session_id].group, []).append(session_id)
        return dict(sorted(queues.items()))

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

    def _decide_group(
        self,
        s: ClusterState,
        group: str,
        settings: GroupSettings,
        order: Iterable[str],
        excluded: AbstractSet[str],
        now: datetime,
        emit: Callable[[AnyEvent], None],
        out: list[AnyEvent],
    ) -> None:
        """Place what fits of one group's queue, taken in ``order``, on its agents only
        (every agent in ``excluded`` is another group's, or not heard from yet)."""
        place = self._policy(group, settings.policy)
        failed: set[tuple[Slots, str, tuple[str, ...]]] = set()
        reserved: str | None = None
        unsatisfiable: dict[tuple[Slots, str, tuple[str, ...]], Refusal | None] = {}
        pulling: dict[str, frozenset[str]] = {}
        for session_id in order:
            if len(out) >= _MAX_DECISIONS:
                break
            v = s.sessions[session_id]
            prov = Provenance(NAME, now, v.request_id, v.correlation_id)
            shape = (v.slots, v.image, v.gpu_models)
            if shape not in unsatisfiable:  # once per shape and round: it scans every agent
                unsatisfiable[shape] = never_fits(
                    s, v.slots, v.image, gpu_models=v.gpu_models, group=group
                )
            why = unsatisfiable[shape]
            if why is not None:
                emit(
                    stamp(
                        SessionRejected,
                        prov,
                        session_id=session_id,
                        owner=v.owner,
                        code=why.code,
                        reason=why.reason,
                    )
                )
                continue
            placement = None
            if shape not in failed and reserved is None:
                if v.image not in pulling:  # once per image and round: it scans every agent
                    pulling[v.image] = pullers(s, v.image)
                placement = _holders_first(place, s, v, excluded, pulling[v.image])
            if placement is None:
                failed.add(shape)  # the same shape cannot fit either until something frees
                if (
                    reserved is None
                    and (now - _admitted_at(v)).total_seconds() > self.reserve_after_s
                    and never_fits(
                        s, v.slots, v.image, live_only=True, gpu_models=v.gpu_models, group=group
                    )
                    is None
                ):
                    # It waited too long behind smaller sessions that kept fitting: nothing
                    # after it is placed until it fits (no starvation; Backend.AI #13706).
                    reserved = session_id
                limit = settings.pending_timeout_s
                if limit is not None and (now - _admitted_at(v)).total_seconds() >= limit:
                    emit(self._cancel_pending(s, v, limit, prov))
                elif v.waiting is None:
                    reason = _waiting_reason(s, v.slots)
                    emit(stamp(SessionQueued, prov, session_id=session_id, reason=reason))
                continue
            agent_id, devices = placement
            emit(
                stamp(
                    SessionScheduled,
                    prov,
                    session_id=session_id,
                    owner=v.owner,
                    agent_id=agent_id,
                    slots=v.slots,
                    devices=devices,
                )
            )

    def _cancel_pending(
        self, s: ClusterState, v: SessionView, limit: int, prov: Provenance
    ) -> AnyEvent:
        waiting = _waiting_reason(s, v.slots)
        reason = f"nothing fits within the pending timeout of {limit} s ({waiting})"
        return stamp(SessionCancelled, prov, session_id=v.session_id, owner=v.owner, reason=reason)

    def _answer_destroy(self, s: ClusterState, d: SessionDestroyRequested) -> AnyEvent:
        v = s.sessions.get(d.session_id)
        prov = Provenance(NAME, self.clock.now(), d.id, d.correlation_id or d.id)
        refuse = None
        if v is None:
            refuse = "no such session"
        elif v is ENDED_STUB:
            refuse = "the session already ended"
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


def _holders_first(
    place: PlacementPolicy,
    s: ClusterState,
    v: SessionView,
    excluded: AbstractSet[str],
    pulling: frozenset[str],
) -> Placement | None:
    """Where ``place`` puts ``v`` among the agents holding its image; among every agent
    that may take it (``pulling`` too: they would pull it first) if none fits."""
    if pulling:
        held = place(s, v.slots, v.image, excluded | pulling, v.gpu_models)
        if held is not None:
            return held
    return place(s, v.slots, v.image, excluded, v.gpu_models)


def _outside(s: ClusterState, group: str) -> frozenset[str]:
    """The agents of every other group: nothing of ``group`` goes there."""
    return frozenset(agent_id for agent_id, a in s.agents.items() if a.group != group)


def _waiting_reason(s: ClusterState, need: Slots) -> str:
    largest = s.fit.largest()
    return (
        f"waiting for {format_slots(need)}; largest free share on a device: "
        f"{format_fgpu(largest)} fGPU"
    )


def _running_at(v: SessionView) -> datetime:
    """When it started running (the agent's report's time)."""
    for t in reversed(v.history):
        if t.status is S.RUNNING:
            return t.at
    return v.requested_at


def _admitted_at(v: SessionView) -> datetime:
    """When the quota actor admitted it: our own clock's time, not the client's."""
    for t in v.history:
        if t.status is S.PENDING:
            return t.at
    return v.requested_at
