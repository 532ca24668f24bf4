"""The serving actor: judges people's serve requests and keeps every endpoint at the
replicas it wants.

Each round it answers the undecided requests (``services.domain.serving.rules``: the
decision, or ``serve.refused``), then reconciles (``services.domain.serving.reconcile``):
replicas are sessions of type ``inference`` asked for in the endpoint owner's name, so
they are admitted against the owner's quota and placed like any other session. A round
is one atomic batch per 1,000 events, expecting ``fgpu.serving``'s last sequence: a
replica's session request stands in the same batch as its ``provisioning`` record, so
the log holds both or neither, and two serving actors never both act on one view.

Beside the rounds, a ticker appends ``serving.ticked`` when a replica's drain time or
warm-up deadline falls due (``services.domain.serving.timers.next_due``), so that the
next round, folding the tick, sees the time has come: the log's clock, not this one.
"""

from datetime import datetime

import anyio
from anyio.abc import TaskStatus

from events import AnyEvent, ServeRefused, ServingTicked
from events import subjects as subj
from services.actors.common import LogActor, Provenance, stamp
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import apply_decision
from services.domain.serving.reconcile import reconcile
from services.domain.serving.rollout import advance
from services.domain.serving.rules import decide, refusal
from services.domain.serving.timers import next_due
from services.ports import MAX_BATCH, LogError

__all__ = ["ServingActor"]

NAME = "serving"


class ServingActor(LogActor):
    NAME = NAME

    _state: ClusterState | None = None
    _appending: anyio.Lock | None = None
    _rescheduled: anyio.Event | None = None

    async def run(
        self, *, task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Decide for ever, with the ticker beside; started once the state is rebuilt."""
        self._appending = anyio.Lock()
        self._rescheduled = anyio.Event()
        async with anyio.create_task_group() as tg:
            self._state = await tg.start(super().run)
            task_status.started(self._state)
            await self._tick()

    async def _tick(self) -> None:
        """Append a tick whenever the fold's next clock runs out (the rounds reschedule)."""
        assert self._rescheduled is not None
        ticked: datetime | None = None  # the last tick appended, maybe not folded yet
        while True:
            changed = self._rescheduled
            due = None if self._state is None else next_due(self._state.serving)
            if due is None or (ticked is not None and due <= ticked):
                await changed.wait()
                continue
            with anyio.move_on_after(max((due - self.clock.now()).total_seconds(), 0.0)) as t:
                await changed.wait()
            if t.cancelled_caught and self._state is not None:
                ticked = self.clock.now()
                tick = stamp(ServingTicked, Provenance(NAME, ticked))
                try:
                    await self._append(self._state, [(subj.SERVING, tick)])
                except LogError:  # a round appended first, or the server is away: the
                    ticked = None  # next round's state says whether it is still due
                    await changed.wait()

    async def react(self, s: ClusterState) -> None:
        self._state = s
        if self._rescheduled is not None:
            self._rescheduled.set()
            self._rescheduled = anyio.Event()
        items = self.answers(s)
        items += self.rollouts(s)
        steps = reconcile(s.serving, s.sessions, _asked(s), Provenance(NAME, self.clock.now()))
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
        if self._appending is None:
            await self._append_now(s, items)
            return
        async with self._appending:
            await self._append_now(s, items)

    async def _append_now(self, s: ClusterState, items: list[tuple[str, AnyEvent]]) -> None:
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

    def rollouts(self, s: ClusterState) -> list[tuple[str, AnyEvent]]:
        """Each rollout's next step (``services.domain.serving.rollout``), applied to
        ``s`` so that reconcile fills (or drains) its slots in the same round."""
        prov = Provenance(NAME, self.clock.now())
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
            why = refusal(s.serving, s.tenancy, r, now)
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


def _asked(s: ClusterState) -> dict[str, object]:
    """Destroy requests on the log, answered or not (by id)."""
    return {**s.destroys, **s.destroy_answers}
