"""Time travel: ``/v1/state``, the cluster as it was at an instant or a log sequence.

Who may read: each viewer the live sessions in its scope, and the agents with only those
sessions' shares named; the counts of ended sessions are a superadmin's alone.
"""

from datetime import datetime
from typing import Annotated, Any

import duckdb
from fastapi import FastAPI, HTTPException, Query

from projections.replay import seq_at, state_at
from projections.store import applied_seq
from services.api import models, shapes
from services.api.guard import Who
from services.api.params import MAX_SEQ, NOT_FOUND, Ask, utc
from services.domain.access.visibility import Viewer
from services.domain.status import ENDED

__all__ = ["mount"]


def mount(app: FastAPI, query: Ask[Any]) -> None:
    @app.get("/v1/state", tags=["time travel"], responses=NOT_FOUND)
    async def state(
        at: Annotated[datetime | None, Query(description="an instant (UTC if no offset)")] = None,
        seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description="a log sequence")] = None,
        *,
        viewer: Who,
    ) -> models.ClusterAt:
        """The cluster as it was at ``at`` (the log up to the last event stamped at or
        before it) or right after record ``seq``; now if neither is given. Computed by
        replaying the log from the nearest snapshot."""
        if at is not None and seq is not None:
            raise HTTPException(422, "give either at or seq, not both")
        when = utc(at, "at")
        found: models.ClusterAt = await query(lambda con: _cluster_at(con, viewer, seq, when))
        return found


def _cluster_at(
    con: duckdb.DuckDBPyConnection, viewer: Viewer, seq: int | None, when: datetime | None
) -> models.ClusterAt:
    """The cluster right after record ``seq``, else as of ``when``, else now, as
    ``viewer`` may see it. Raises HTTPException (404: ``seq`` beyond the log's end)."""
    end = applied_seq(con)
    if seq is not None and seq > end:
        raise HTTPException(404, f"sequence {seq} is beyond the log's end ({end})")
    n = seq if seq is not None else (seq_at(con, when) if when is not None else end)
    past = state_at(con, n)
    seen = viewer.scope.sees_session
    live = [v for v in past.sessions() if v.status not in ENDED and seen(v.owner, v.user, v.domain)]
    counts: dict[str, int] = dict(past.ended_counts) if viewer.scope.everything else {}
    for v in live:
        counts[v.status.value] = counts.get(v.status.value, 0) + 1
    owners = {v.session_id: v.owner for v in live}
    return models.ClusterAt(
        seq=past.seq,
        at=past.at,
        last_seq=end,
        counts=counts,
        sessions=[shapes.session_from_view(v) for v in live],
        agents=[
            _only_shares_of(shapes.agent_from_view(past.state.agents[k], owners), owners)
            for k in sorted(past.state.agents)
        ],
        owners=shapes.owners_from_state(past.state, live, viewer.scope),
    )


def _only_shares_of(a: models.Agent, sessions: dict[str, str]) -> models.Agent:
    """``a`` with only the shares of ``sessions``."""
    for g in a.gpus:
        g.shares = [s for s in g.shares if s.session in sessions]
    return a
