"""The images the agents hold, and what each domain may run: ``/v1/images`` and
``/v1/image-policies``.

Who may read: any signed-in key sees every image the agents hold (as it sees the agents);
a domain's allow-list and aliases are shown to its members and to superadmins.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import duckdb
from fastapi import FastAPI

from projections import queries
from projections.store import applied_seq
from services.api import models, shapes
from services.api.guard import Who
from services.domain.tenancy import Tenancy

__all__ = ["mount"]

T = TypeVar("T")
Query = Callable[[Callable[[duckdb.DuckDBPyConnection], T]], Awaitable[T]]


def mount(app: FastAPI, query: Query[Any], tenancy: Callable[[], Tenancy]) -> None:
    @app.get("/v1/images", tags=["images"])
    async def list_images(viewer: Who) -> models.Images:
        """Each image name the agents hold, with its tags: the engines' ids, the registry's
        digests, the size and which agents hold each (lost agents included)."""
        rows, seq = await query(lambda con: (queries.agent_rows(con), applied_seq(con)))
        return models.Images(last_seq=seq, images=shapes.images_from_agents(rows))

    @app.get("/v1/image-policies", tags=["images"])
    async def image_policies(viewer: Who) -> list[models.ImagePolicy]:
        """Each domain's image allow-list and aliases: every domain for a superadmin, else
        the viewer's own."""
        t = tenancy()
        domains = sorted(t.domains) if viewer.scope.everything else [viewer.domain]
        return [
            models.ImagePolicy(
                domain=d,
                images=None if t.images.get(d) is None else list(t.images[d]),
                aliases=dict(sorted(t.aliases.get(d, {}).items())),
            )
            for d in domains
            if d is not None
        ]
