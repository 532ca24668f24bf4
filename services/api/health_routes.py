"""The log's health, and the stack's at a glance: ``/v1/health`` and ``/v1/status``.

Who may read: ``/v1/health`` any signed-in key (it says why a request may fail: the log's
disk full, say); ``/v1/status`` (``fgpu status``) superadmins only, the cluster's
operators: the others get 403. The status says each actor snapshot's health and age (not
what it holds) where the serving process reads them with a service's keypair.

The log's health is each server's latest ``log.health`` as the log holds it, over which
the watcher beside the server, when it runs in this process (``fgpu up``), lays what it
finds now: a full disk stores nothing, that record included, so it is known here first.
"""

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import duckdb
from fastapi import FastAPI, HTTPException

from events import LogHealth, SpaceState
from projections import queries
from projections.store import applied_seq
from services.api import models
from services.api.guard import Who
from services.ports import LogError

__all__ = ["Health", "mount"]

T = TypeVar("T")
Query = Callable[[Callable[[duckdb.DuckDBPyConnection], T]], Awaitable[T]]
# Each server's health, and whether it was found now (True) or read off the log.
Health = Callable[[], Iterable[tuple[LogHealth, bool]]]
# Each kind of actor snapshot's health (``services.actors.snapshots.survey``), where the
# process serving can read them (``fgpu up``'s, with its services' keypairs).
Snapshots = Callable[[], Awaitable[list[dict[str, Any]]]]
_SOUND = ("ok", "none")  # a snapshot in either state costs an actor nothing it need not


def mount(
    app: FastAPI, query: Query[Any], health: Health, snapshots: Snapshots | None = None
) -> None:
    @app.get("/v1/health", tags=["health"])
    async def get_health(viewer: Who) -> models.Health:
        """The room on the disk under each of the log's servers: ok, low (no new sessions
        are admitted) or full (nothing can be written), with the reason in one line."""
        return models.Health(log=_shown(health()))

    @app.get("/v1/status", tags=["health"], responses={403: {"model": models.Problem}})
    async def get_status(viewer: Who) -> models.Status:
        """The stack at a glance (superadmins): whether all is well, the log's health, the
        agents alive and lost, each actor snapshot's health and age, and how far the
        projections have read the log."""
        if not viewer.scope.everything:
            raise HTTPException(403, "only a superadmin may see the stack's status")
        rows, seq = await query(lambda con: (queries.agent_rows(con), applied_seq(con)))
        log = _shown(health())
        lost = sum(1 for a in rows if a["lost"])
        found = None if snapshots is None else await _snapshots(snapshots)
        return models.Status(
            ok=all(h.state == SpaceState.OK.value for h in log)
            and not lost
            and all(s.health in _SOUND for s in found or ()),
            last_seq=seq,
            log=log,
            agents=models.AgentCount(alive=len(rows) - lost, lost=lost),
            snapshots=found,
        )


async def _snapshots(snapshots: Snapshots) -> list[models.SnapshotState]:
    """Each kind's snapshot now; one ``unreadable`` row when the log cannot say (its end
    or identity): the status still answers, saying so."""
    try:
        rows = await snapshots()
    except LogError as e:
        return [
            models.SnapshotState(
                kind="*",
                health="unreadable",
                reason=str(e),
                seq=None,
                behind=None,
                bytes=None,
                saved_at=None,
                age_s=None,
            )
        ]
    return [models.SnapshotState.model_validate(r) for r in rows]


def _shown(found: Iterable[tuple[LogHealth, bool]]) -> list[models.LogSpace]:
    return [
        models.LogSpace(
            server=h.server,
            path=h.path,
            state=h.state.value,
            reason=h.reason,
            free_bytes=h.free_bytes,
            total_bytes=h.total_bytes,
            watermark_bytes=h.watermark_bytes,
            unwritable_since=h.unwritable_since,
            at=h.at,
            live=live,
        )
        for h, live in sorted(found, key=lambda found: found[0].server)
    ]
