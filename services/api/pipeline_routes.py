"""Pipeline runs: ``/v1/pipelines`` (the runs in scope) and ``/v1/pipelines/{run_id}`` (one
run: its DAG, each task's state and its current session's status).

Who may read: as sessions (``Scope.sees_session`` of the run's owner): a user its own
runs, a domain admin its domain's, a superadmin every run; a run out of scope is answered
404, as if it did not exist. The runs are the fold of the log's pipeline records
(``services.domain.pipelines.runs``), read from the projection's audit table.
"""

from collections.abc import Callable
from typing import Annotated, Any

import duckdb
from fastapi import FastAPI, HTTPException, Query

from events import Record, decode
from services.api.guard import Who
from services.api.params import NOT_FOUND, Ask
from services.api.pipeline_shapes import PipelineRun, RunPage, run_shape
from services.domain.access.visibility import Viewer
from services.domain.pipelines.runs import PipelineState, Run, fold
from services.domain.tenancy.admin import DEFAULT
from services.domain.tenancy.model import Tenancy

__all__ = ["mount"]

_RUNS = "SELECT seq, subject, payload FROM events WHERE type LIKE 'pipeline.%' ORDER BY seq"
_STATUSES = "SELECT session_id, status FROM sessions WHERE list_contains(?, session_id)"


def mount(app: FastAPI, query: Ask[Any], tenancy: Callable[[], Tenancy]) -> None:
    @app.get("/v1/pipelines", tags=["pipelines"])
    async def list_runs(
        viewer: Who,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> RunPage:
        """The runs in the viewer's scope, newest first, with their tasks' states."""
        state = await query(_folded)
        t = tenancy()
        runs = [r for r in state.runs.values() if _sees(t, viewer, r)]
        runs.sort(key=lambda r: r.requested_at, reverse=True)
        runs = runs[:limit]
        statuses = await query(lambda con: _session_statuses(con, runs))
        return RunPage(total=len(runs), runs=[run_shape(r, statuses) for r in runs])

    @app.get("/v1/pipelines/{run_id}", tags=["pipelines"], responses=NOT_FOUND)
    async def get_run(run_id: str, viewer: Who) -> PipelineRun:
        """One run: its tasks (the DAG: each with its dependencies), their states,
        attempts and current sessions."""
        state = await query(_folded)
        run = state.runs.get(run_id)
        if run is None or not _sees(tenancy(), viewer, run):
            raise HTTPException(404, f"no run {run_id}")
        statuses = await query(lambda con: _session_statuses(con, [run]))
        return run_shape(run, statuses)


def _folded(con: duckdb.DuckDBPyConnection) -> PipelineState:
    records = [
        Record(seq=seq, subject=subject, event=decode(payload))
        for seq, subject, payload in con.execute(_RUNS).fetchall()
    ]
    return fold(records)


def _session_statuses(con: duckdb.DuckDBPyConnection, runs: list[Run]) -> dict[str, str]:
    ids = [t.session_id for r in runs for t in r.tasks.values() if t.session_id is not None]
    if not ids:
        return {}
    return dict(con.execute(_STATUSES, [ids]).fetchall())


def _sees(t: Tenancy, viewer: Viewer, run: Run) -> bool:
    kp = t.keypairs.get(run.owner)
    user = None if kp is None else kp.user
    u = None if user is None else t.users.get(user)
    return viewer.scope.sees_session(run.owner, user, u.domain if u is not None else DEFAULT)
