"""Pipeline runs: ``/v1/pipelines`` (the runs in scope) and ``/v1/pipelines/{run_id}`` (one
run: its DAG, each task's state and its current session's status);
``/v1/pipelines/schedules`` (the schedules in scope); ``/v1/pipelines/limits`` (what the
viewer's own tasks are checked against: ``fgpu pipeline validate``).

Who may read: runs and schedules as sessions (``Scope.sees_session`` of the owner): a
user its own, a domain admin its domain's, a superadmin all; a run out of scope is
answered 404, as if it did not exist. Limits: the viewer's own only, for a project of its
own (no one asks for another's). The runs and schedules are the fold of the log's
pipeline records (``services.domain.pipelines.runs``), read from the projection's audit
table; the limits come from the cluster's state as the projection holds it now.
"""

from collections.abc import Callable
from typing import Annotated, Any

import duckdb
import msgspec
from fastapi import FastAPI, HTTPException, Query

from events import Record, decode
from projections.replay import state_at
from projections.store import applied_seq
from services.api.guard import Who
from services.api.params import NOT_FOUND, Ask
from services.api.pipeline_shapes import (
    PipelineRun,
    RunPage,
    SchedulePage,
    run_shape,
    schedule_shape,
)
from services.domain.access.visibility import Viewer
from services.domain.pipelines.limits import limits_of
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

    # Before ``/v1/pipelines/{run_id}``: matched in order.
    @app.get("/v1/pipelines/schedules", tags=["pipelines"])
    async def list_schedules(viewer: Who) -> SchedulePage:
        """The schedules in the viewer's scope (removed ones too, said so), by id."""
        state = await query(_folded)
        t = tenancy()
        shown = [s for _, s in sorted(state.schedules.items()) if _owner_seen(t, viewer, s.owner)]
        return SchedulePage(total=len(shown), schedules=[schedule_shape(s) for s in shown])

    @app.get("/v1/pipelines/limits", tags=["pipelines"])
    async def own_limits(
        viewer: Who,
        project: Annotated[str | None, Query(description="a project of yours")] = None,
    ) -> dict[str, Any]:
        """What the viewer's own tasks are checked against (``limits.Limits``): its
        project, each level's policy, the resource groups' settings and the capacity of
        each live agent of each group. 422: a project that is not the viewer's."""
        user = tenancy().users.get(viewer.user or "")
        if project is not None and (user is None or project not in user.projects):
            raise HTTPException(422, f"{project!r} is not a project of yours")
        state = await query(lambda con: state_at(con, applied_seq(con)).state)
        found: dict[str, Any] = msgspec.to_builtins(limits_of(state, viewer.access_key, project))
        return found

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
    return _owner_seen(t, viewer, run.owner)


def _owner_seen(t: Tenancy, viewer: Viewer, owner: str) -> bool:
    kp = t.keypairs.get(owner)
    user = None if kp is None else kp.user
    u = None if user is None else t.users.get(user)
    return viewer.scope.sees_session(owner, user, u.domain if u is not None else DEFAULT)
