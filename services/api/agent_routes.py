"""Agents, their GPUs and what is allocated on them: ``/v1/agents`` and ``/v1/usage``.

Who may read: any signed-in key sees every agent and its capacity; of the fGPU shares on
a GPU, only those of sessions in the viewer's scope are named (the others count in what
is allocated, unnamed).
"""

from typing import Any

import duckdb
from fastapi import FastAPI, HTTPException

from projections import queries
from projections.store import applied_seq
from services.api import models, shapes
from services.api.guard import Who
from services.api.params import NOT_FOUND, Ask
from services.domain.access.visibility import Viewer

__all__ = ["mount"]

_TOTALS = (
    "cap_fgpu",
    "cap_cpu",
    "cap_mem",
    "alloc_fgpu",
    "alloc_cpu",
    "alloc_mem",
    "free_fgpu",
    "free_cpu",
    "free_mem",
)


def mount(app: FastAPI, query: Ask[Any]) -> None:
    @app.get("/v1/agents", tags=["agents"])
    async def list_agents(viewer: Who) -> models.AgentList:
        """Agents with their capacity and each GPU's fGPU shares, by session (only the
        viewer's sessions' shares are named; the others count in what is allocated)."""
        rows, seq = await query(
            lambda con: (_agents_seen(con, viewer, queries.agent_rows(con)), applied_seq(con))
        )
        return models.AgentList(last_seq=seq, agents=[shapes.agent_from_row(a) for a in rows])

    @app.get("/v1/agents/{agent_id}", tags=["agents"], responses=NOT_FOUND)
    async def get_agent(agent_id: str, viewer: Who) -> models.Agent:
        rows = await query(lambda con: _agents_seen(con, viewer, queries.agent_rows(con, agent_id)))
        if not rows:
            raise HTTPException(404, f"no agent {agent_id!r}")
        return shapes.agent_from_row(rows[0])

    @app.get("/v1/usage", tags=["agents"])
    async def usage(viewer: Who) -> models.Usage:
        """Allocated against capacity, per agent and GPU, and per owner (the owners in the
        viewer's scope)."""

        def work(con: duckdb.DuckDBPyConnection) -> tuple[list[Any], list[Any], int]:
            owners = [o for o in queries.owner_usage(con) if viewer.scope.sees_key(o["owner"])]
            return queries.agent_rows(con), owners, applied_seq(con)

        agents, owners, seq = await query(work)
        totals = {k: sum(a[k] for a in agents) for k in _TOTALS}
        return models.Usage(
            last_seq=seq,
            capacity=shapes.amounts(totals["cap_fgpu"], totals["cap_cpu"], totals["cap_mem"]),
            allocated=shapes.amounts(
                totals["alloc_fgpu"], totals["alloc_cpu"], totals["alloc_mem"]
            ),
            free=shapes.amounts(totals["free_fgpu"], totals["free_cpu"], totals["free_mem"]),
            agents=[_agent_usage(shapes.agent_from_row(a)) for a in agents],
            owners=shapes.owners_from_rows(owners),
        )


def _agents_seen(
    con: duckdb.DuckDBPyConnection, viewer: Viewer, agents: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``agents`` (rows) with only the shares of sessions in the viewer's scope."""
    if viewer.scope.everything:
        return agents
    ids = [s["session_id"] for a in agents for g in a["gpus"] for s in g["shares"]]
    seen = queries.visible_sessions(con, ids, viewer.scope)
    for a in agents:
        for g in a["gpus"]:
            g["shares"] = [s for s in g["shares"] if s["session_id"] in seen]
    return agents


def _agent_usage(a: models.Agent) -> models.AgentUsage:
    return models.AgentUsage(
        id=a.id,
        lost=a.lost,
        capacity=a.capacity,
        allocated=a.allocated,
        free=a.free,
        gpus=[
            models.GpuUsage(index=g.index, capacity=g.capacity, allocated=g.allocated, free=g.free)
            for g in a.gpus
        ],
    )
