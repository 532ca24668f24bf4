"""The registrar: answers administrators' requests, after checking the requester's role.

Every change of tenancy or policy goes through it, as every placement goes through the
scheduler: a request (``AdminRequested``, on the requester's own subject) is applied
(``AdminApplied``) or refused with a reason (``AdminRefused``), judged by
``services.domain.tenancy.admin.refusal`` against the tenancy as the log has it. A round's
answers are one atomic batch on ``fgpu.tenancy`` expecting the subject's last sequence,
so two registrars running by mistake never both apply from one view of the tenancy.
"""

from events import AdminApplied, AdminRefused, AnyEvent
from events import subjects as subj
from services.actors.common import LogActor, Provenance, append_expecting, stamp
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import apply_decision
from services.domain.tenancy.admin import refusal

__all__ = ["RegistrarActor"]

NAME = "registrar"
_MAX_ANSWERS = 1000  # the server's largest atomic batch


class RegistrarActor(LogActor):
    """Answers administrators' requests: applied to the tenancy, or refused."""

    NAME = NAME

    async def react(self, s: ClusterState) -> None:
        while s.admin_requests:
            answers = self.decide(s)
            await append_expecting(self.events, s, subj.TENANCY, answers)

    def decide(self, s: ClusterState) -> list[tuple[str, AnyEvent]]:
        """Answers to the undecided requests, in the order they came, each applied to ``s``
        before the next is judged (a domain created, then a project in it)."""
        now = self.clock.now()
        out: list[tuple[str, AnyEvent]] = []
        for request in list(s.admin_requests.values())[:_MAX_ANSWERS]:
            prov = Provenance(NAME, now, request.id, request.correlation_id or request.id)
            why = refusal(s.tenancy, request.requester, request.command)
            answer: AnyEvent
            if why is None:
                answer = stamp(
                    AdminApplied, prov, requester=request.requester, command=request.command
                )
            else:
                answer = stamp(
                    AdminRefused,
                    prov,
                    requester=request.requester,
                    code=why.code,
                    reason=why.reason,
                )
            apply_decision(s, answer)
            out.append((subj.TENANCY, answer))
        return out
