"""The images the agents hold, and what each domain may run: ``/v1/images`` and
``/v1/image-policies``.

Who may read: any signed-in key sees every image the agents hold (as it sees the agents),
each tag marked as its own domain may run it or not; a domain's allow-list and aliases
(and the listing marked for another domain) are shown to its members and to superadmins.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import duckdb
from fastapi import FastAPI, HTTPException

from projections import queries
from projections.store import applied_seq
from services.api import models, shapes
from services.api.guard import Who
from services.domain.scheduling.images import image_refusal
from services.domain.tenancy.model import Tenancy

__all__ = ["mount"]

T = TypeVar("T")
Query = Callable[[Callable[[duckdb.DuckDBPyConnection], T]], Awaitable[T]]


def mount(app: FastAPI, query: Query[Any], tenancy: Callable[[], Tenancy]) -> None:
    @app.get("/v1/images", tags=["images"], responses={403: {"model": models.Problem}})
    async def list_images(viewer: Who, domain: str | None = None) -> models.Images:
        """Each image name the agents hold, with its tags: the engines' ids, the registry's
        digests, the size, which agents hold each (lost agents included), and whether
        sessions of ``domain`` (default: the viewer's own) may run it. Another domain's
        answer is a superadmin's to ask for: it would show that domain's allow-list."""
        if domain is not None and domain != viewer.domain and not viewer.scope.everything:
            raise HTTPException(403, f"only a superadmin may list images for domain {domain}")
        chosen = domain if domain is not None else viewer.domain
        rows, seq = await query(lambda con: (queries.agent_rows(con), applied_seq(con)))
        images = shapes.images_from_agents(rows)
        if chosen is not None:
            t = tenancy()
            for name in images:
                for tag in name.tags:
                    tag.allowed = image_refusal(t, chosen, tag.ref) is None
        return models.Images(last_seq=seq, domain=chosen, images=images)

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
