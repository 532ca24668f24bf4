"""A router's health reports, as the tests of serving play one."""

from collections.abc import Iterable
from datetime import UTC, datetime

from events import ReplicaHealthReported
from events import subjects as subj
from services.domain.provenance import Provenance, stamp
from services.ports import EventLog

__all__ = ["report_health"]


async def report_health(
    log: EventLog, endpoint_id: str, sessions: Iterable[str], *, healthy: bool, router: str = "r1"
) -> None:
    """What router ``router`` found of each replica in ``sessions``, on its own subject."""
    for session_id in sessions:
        e = stamp(
            ReplicaHealthReported,
            Provenance(f"router:{router}", datetime.now(UTC)),
            router=router,
            endpoint_id=endpoint_id,
            session_id=session_id,
            healthy=healthy,
        )
        await log.append(subj.route(router), e)
