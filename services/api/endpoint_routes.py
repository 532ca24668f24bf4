"""Serving endpoints as the projections hold them: ``/v1/endpoints`` (those in the
viewer's scope) and ``/v1/endpoints/{ref}`` (one, by id or name).

Who may read: an endpoint's owner, its domain's administrators, a superadmin (the scope
of sessions, ``Scope.sees_session`` with the endpoint's owner and domain); one out of
scope answers 404, as one that does not exist.
"""

import json
from typing import Any

import duckdb
from fastapi import FastAPI, HTTPException

from projections.store import applied_seq
from services.api import models
from services.api.guard import Who
from services.api.params import NOT_FOUND, Ask
from services.domain.access.visibility import Scope

__all__ = ["mount", "seen_endpoint"]

_SELECT = "SELECT owner, domain, detail FROM endpoints"


def _seen(rows: list[tuple[str, str, str]], scope: Scope) -> list[models.Endpoint]:
    return [
        models.Endpoint.model_validate(json.loads(detail))
        for owner, domain, detail in rows
        if scope.sees_session(owner, None, domain)
    ]


async def seen_endpoint(query: Ask[Any], scope: Scope, ref: str) -> models.Endpoint:
    """Endpoint ``ref`` (its id or name) as ``scope`` may see it; 404 (HTTPException) for
    one out of scope, as for one that does not exist."""

    def work(con: duckdb.DuckDBPyConnection) -> list[Any]:
        return con.execute(f"{_SELECT} WHERE endpoint_id = ? OR name = ?", [ref, ref]).fetchall()

    seen = _seen(await query(work), scope)
    if not seen:
        raise HTTPException(404, f"no endpoint {ref}")
    return seen[0]


def mount(app: FastAPI, query: Ask[Any]) -> None:
    @app.get("/v1/endpoints", tags=["serving"])
    async def list_endpoints(viewer: Who) -> models.EndpointList:
        """The endpoints in the viewer's scope, by name."""

        def work(con: duckdb.DuckDBPyConnection) -> tuple[list[Any], int]:
            return con.execute(f"{_SELECT} ORDER BY name").fetchall(), applied_seq(con)

        rows, seq = await query(work)
        return models.EndpointList(last_seq=seq, endpoints=_seen(rows, viewer.scope))

    @app.get("/v1/endpoints/{ref}", tags=["serving"], responses=NOT_FOUND)
    async def get_endpoint(ref: str, viewer: Who) -> models.Endpoint:
        """One endpoint, by its id or its name."""
        return await seen_endpoint(query, viewer.scope, ref)
