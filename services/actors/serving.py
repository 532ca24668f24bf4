"""The serving actor: judges people's serve requests and keeps every endpoint at the
replicas it wants.

Each round it answers the undecided requests (``services.domain.serving.rules``: the
decision, or ``serve.refused``), then reconciles (``services.domain.serving.reconcile``):
replicas are sessions of type ``inference`` asked for in the endpoint owner's name, so
they are admitted against the owner's quota and placed like any other session. A round
is one atomic batch per 1,000 events, expecting ``fgpu.serving``'s last sequence: a
replica's session request stands in the same batch as its ``provisioning`` record, so
the log holds both or neither, and two serving actors never both act on one view.

Between answers and reconciling, rollouts take their next step
(``services.domain.serving.rollout``) and endpoints with an autoscaling rule get the
replicas it wants (``services.domain.serving.autoscale``). Some answers change with time
alone: a cooldown ends, an idle spell grows long enough, a replica's drain time or
warm-up deadline falls due (``services.domain.serving.timers``). So a timer runs a round
at the next such time too; rounds never overlap (one lock). A round past a drain or
deadline appends ``serving.ticked`` first and folds it, so that the log's clock, not
this one, says the time has come: a rebuilt actor decides the same. A timed round whose
append fails leaves a state the log may not hold: the next round on it fails on purpose,
and the log is folded again, as after any failed append.
"""

from datetime import datetime

import anyio
import structlog
from anyio.abc import TaskStatus

from events import AnyEvent, ServeRefused, ServingTicked
from events import subjects as subj
from services.actors.common import LogActor, Provenance, stamp
from services.actors.snapshots import Snapshots
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import apply_decision
from services.domain.serving.autoscale import autoscale, next_due
from services.domain.serving.reconcile import reconcile
from services.domain.serving.rollout import advance
from services.domain.serving.rules import decide, refusal
from services.domain.serving.timers import next_due as next_tick
from services.ports import MAX_BATCH, Clock, ConcurrencyConflict, EventLog, LogError

__all__ = ["ServingActor"]

NAME = "serving"


log = structlog.get_logger()

MAX_WAIT_S = 30.0  # a timed round at least this often, whatever the times say


class ServingActor(LogActor):
    NAME = NAME

    def __init__(
        self,
        events: EventLog,
        clock: Clock,
        *,
        durable: str | None = None,
        snapshots: Snapshots | None = None,
    ) -> None:
        super().__init__(events, clock, durable=durable, snapshots=snapshots)
        self._lock = anyio.Lock()
        self._state: ClusterState | None = None
        self._broken: ClusterState | None = None
        self._woken = anyio.Event()

    async def run(
        self, *, task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Decide after every batch and at every due time; started once rebuilt."""
        async with anyio.create_task_group() as tg:
            state: ClusterState = await tg.start(super().run)
            tg.start_soon(self._timer)
            task_status.started(state)

    def poke(self) -> None:
        """Look at the due times now (a test's clock moved)."""
        self._woken.set()

    async def react(self, s: ClusterState) -> None:
        async with self._lock:
            if s is self._broken:
                raise ConcurrencyConflict("a timed round failed to append: fold the log again")
            self._state = s
            await self._round(s)
        self.poke()  # the due times may have moved

    async def _timer(self) -> None:
        while True:
            woken = self._woken
            wait = MAX_WAIT_S if self._state is None else self._wait(self._state)
            with anyio.move_on_after(wait) as timer:
                await woken.wait()
            self._woken = anyio.Event()
            if not timer.cancelled_caught:
                continue  # a round ran or a poke came: the due times are looked at again
            async with self._lock:
                s = self._state
                if s is None or s is self._broken:
                    continue
                try:
                    await self._round(s)
                except LogError as e:
                    log.warning("serving.timed_round_failed", error=str(e))
                    self._broken = s

    def _wait(self, s: ClusterState) -> float:
        now = self.clock.now()
        due = [d for ep in s.serving.endpoints.values() if (d := next_due(ep, now)) is not None]
        if (tick := next_tick(s.serving)) is not None:
            due.append(tick)
        if not due:
            return MAX_WAIT_S
        return min(MAX_WAIT_S, max(0.0, (min(due) - now).total_seconds()))

    async def _round(self, s: ClusterState) -> None:
        now: datetime = self.clock.now()
        items = self.answers(s)
        prov = Provenance(NAME, now)
        items += self._tick(s, prov)
        items += self._rollouts(s, prov)
        for step in autoscale(s.serving, now, prov):
            apply_decision(s, step[1])
            items.append(step)
        steps = reconcile(s.serving, s.sessions, _Asked(s), prov, s.ended)
        for _, e in steps:
            apply_decision(s, e)
        items += steps
        for start in range(0, len(items), MAX_BATCH):
            await self._append(s, items[start : start + MAX_BATCH])

    async def _append(self, s: ClusterState, items: list[tuple[str, AnyEvent]]) -> None:
        """One atomic batch expecting ``fgpu.serving``'s last sequence where it holds a
        record of it: those records first, then the sessions' requests and destroys. A
        batch is stored in the order given and without a gap, so the subject's new last
        sequence is the batch's last less the records after it. Destroys alone are
        appended each deduped by its id (derived from the replica's session: asked
        again, stored once)."""
        ours = [item for item in items if item[0] == subj.SERVING]
        others = [item for item in items if item[0] != subj.SERVING]
        if not ours:
            await self.events.append_many(others)
            return
        last = await self.events.append_batch(
            ours + others,
            expect_subject=subj.SERVING,
            expected_last_subject_seq=s.subject_seq.get(subj.SERVING, 0),
        )
        s.subject_seq[subj.SERVING] = last - len(others)

    def _tick(self, s: ClusterState, prov: Provenance) -> list[tuple[str, AnyEvent]]:
        """``serving.ticked`` at the round's time if a drain or deadline is due by then,
        folded into ``s`` so that the round's reconcile sees the time has come."""
        due = next_tick(s.serving)
        if due is None or due > prov.at:
            return []
        tick = stamp(ServingTicked, prov)
        apply_decision(s, tick)
        return [(subj.SERVING, tick)]

    def _rollouts(self, s: ClusterState, prov: Provenance) -> list[tuple[str, AnyEvent]]:
        """Each rollout's next step (``services.domain.serving.rollout``), applied to
        ``s`` so that reconcile fills (or drains) its slots in the same round (whose
        time is ``prov``'s: one reading of the clock a round)."""
        out: list[tuple[str, AnyEvent]] = []
        for ep in list(s.serving.endpoints.values()):
            for e in advance(ep, prov):
                apply_decision(s, e)
                out.append((subj.SERVING, e))
        return out

    def answers(self, s: ClusterState) -> list[tuple[str, AnyEvent]]:
        """Answers to the undecided requests, in the order they came, each applied to
        ``s`` before the next is judged (an endpoint created, then scaled)."""
        now = self.clock.now()
        out: list[tuple[str, AnyEvent]] = []
        for r in list(s.serving.requests.values())[:MAX_BATCH]:
            prov = Provenance(NAME, now, r.id, r.correlation_id or r.id)
            why = refusal(s.serving, s.tenancy, r, now, s.secrets)
            answers: list[AnyEvent]
            if why is None:
                answers = decide(s.serving, s.tenancy, r, prov)
            else:
                answers = [
                    stamp(
                        ServeRefused, prov, requester=r.requester, code=why.code, reason=why.reason
                    )
                ]
            for e in answers:
                apply_decision(s, e)
                out.append((subj.SERVING, e))
        return out


class _Asked:
    """Destroy requests on the log, answered or not (by id): asked of both, never copied
    (the answered ones are every destroy of the log's history)."""

    def __init__(self, s: ClusterState) -> None:
        self.s = s

    def __contains__(self, request_id: object) -> bool:
        return request_id in self.s.destroys or request_id in self.s.destroy_answers
