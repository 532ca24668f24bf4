"""The quota actor: admits or rejects each request against the policies of its keypair,
user, project and domain (``services.domain.scheduling.quota``), and against its domain's image
allow-list, an alias of the domain resolved first (``services.domain.scheduling.images``): the
image a session runs is recorded on its admission (``SessionAdmitted.image``). While the
log's disk is low (its latest ``log.health``, ``services.domain.log_space``), it admits
no new session: each is rejected with code ``disk`` and the reason. A session that refers
to a secret its owner does not have is rejected with code ``secret``.

It also answers payloads that are not valid events with ``PayloadRejected``, so bad
input leaves a trace on the log instead of vanishing or crashing a reader.

A round's decisions, every owner's, are appended to ``fgpu.admission`` as one atomic
batch that expects the subject's last sequence: two quota actors running by mistake
cannot both admit against the same held amount (an owner's, or one its user, project or
domain shares with others); the loser rebuilds and decides again.
"""

import hashlib
from itertools import islice

from events import AnyEvent, PayloadRejected, SessionAdmitted, SessionRejected
from events import subjects as subj
from services.actors.common import LogActor, Provenance, append_expecting, stamp
from services.actors.snapshots import Snapshots
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import apply_decision
from services.domain.log_space import refusal as space_refusal
from services.domain.scheduling.images import image_refusal, resolve_image
from services.domain.scheduling.quota import admission_refusal, mounted_hosts
from services.domain.secrets import missing_secret
from services.domain.tenancy.groups import admission_problem
from services.ports import Clock, EventLog

__all__ = ["QuotaActor"]

NAME = "quota"


class QuotaActor(LogActor):
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
        self._answer_salt: str | None = None  # of the log's identity (_answer_malformed)

    async def react(self, s: ClusterState) -> None:
        await self._answer_malformed(s)
        items: list[tuple[str, AnyEvent]] = []
        now = self.clock.now()
        for session_id in list(islice(s.undecided, 1000)):
            v = s.sessions[session_id]
            image = resolve_image(s.tenancy, v.domain, v.image)
            why = v.invalid
            code = "invalid"
            mounted: tuple[str, ...] | str = ()
            if why is None:
                why = space_refusal(s.log_space.values())
                code = "disk"
            if why is None:
                why = admission_problem(
                    s.tenancy.groups, v.group, v.project, v.lifetime_s, v.slots.fgpu
                )
                code = "group"
            if why is None:
                why = image_refusal(s.tenancy, v.domain, image)
                code = "image"
            if why is None:
                why = admission_refusal(s, v)
                code = "quota"
            if why is None and v.secret_env:
                why = missing_secret(s.secrets, v.owner, v.secret_env)
                code = "secret"
            if why is None:
                mounted = mounted_hosts(s.tenancy, v)
                if isinstance(mounted, str):
                    why, code = mounted, "vfolder"
            prov = Provenance(NAME, now, v.request_id, v.correlation_id)
            decision: AnyEvent
            if why is None:
                decision = stamp(
                    SessionAdmitted,
                    prov,
                    session_id=session_id,
                    owner=v.owner,
                    image=None if image == v.image else image,
                    storage_hosts=() if isinstance(mounted, str) else mounted,
                )
            else:
                decision = stamp(
                    SessionRejected,
                    prov,
                    session_id=session_id,
                    owner=v.owner,
                    code=code,
                    reason=why,
                )
            apply_decision(s, decision)  # later requests of this round see it held
            items.append((subj.ADMISSION, decision))
        if items:
            await append_expecting(self.events, s, subj.ADMISSION, items)

    async def _answer_malformed(self, s: ClusterState) -> None:
        if not s.malformed:
            return
        if self._answer_salt is None:
            # Deterministic for every quota actor of this log, and unknown to the users:
            # an id a user could guess, it could take first (the stream dedupes ids on
            # every subject), and the answer to its payload would never be stored.
            identity = await self.events.identity()
            self._answer_salt = hashlib.sha256(identity.encode()).hexdigest()[:16]
        now = self.clock.now()
        answers: list[PayloadRejected] = []
        for seq, (subject, error) in sorted(s.malformed.items()):
            answer = PayloadRejected(
                # Deterministic id: answering the same payload twice stores one answer.
                id=f"payload-rejected-{self._answer_salt}-{seq}",
                at=now,
                actor=NAME,
                stream_seq=seq,
                subject=subject,
                error=error[:1000],
            )
            answers.append(answer)
        for answer in answers:
            await self.events.append(subj.SYS, answer)
            apply_decision(s, answer)
