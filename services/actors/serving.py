"""The serving actor: judges people's serve requests and keeps every endpoint at the
replicas it wants.

Each round it answers the undecided requests (``services.domain.serving.rules``: the
decision, or ``serve.refused``), then reconciles (``services.domain.serving.reconcile``):
replicas are sessions of type ``inference`` asked for in the endpoint owner's name, so
they are admitted against the owner's quota and placed like any other session. A round
is one atomic batch per 1,000 events, expecting ``fgpu.serving``'s last sequence: a
replica's session request stands in the same batch as its ``provisioning`` record, so
the log holds both or neither, and two serving actors never both act on one view.
"""

from events import AnyEvent, ServeRefused
from events import subjects as subj
from services.actors.common import LogActor, Provenance, stamp
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import apply_decision
from services.domain.serving.reconcile import reconcile
from services.domain.serving.rules import decide, refusal
from services.ports import MAX_BATCH

__all__ = ["ServingActor"]

NAME = "serving"


class ServingActor(LogActor):
    NAME = NAME

    async def react(self, s: ClusterState) -> None:
        items = self.answers(s)
        prov = Provenance(NAME, self.clock.now())
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


class _Asked:
    """Destroy requests on the log, answered or not (by id): asked of both, never copied
    (the answered ones are every destroy of the log's history)."""

    def __init__(self, s: ClusterState) -> None:
        self.s = s

    def __contains__(self, request_id: object) -> bool:
        return request_id in self.s.destroys or request_id in self.s.destroy_answers
