"""The administrators' page's image changes (``/ui/admin/images/{domain}...``): which
images a domain's sessions may run and the aliases its requests may name, each the
administrator's own admin request, the one ``fgpu admin images ...`` sends, on its own
connection, in its name (``ui_admin.Registrar``).

The registrar lets a domain's admins and superadmins change these (docs/images.md); a
domain admin's change of another domain is sent and refused by the registrar with its
reason. It also judges the image references (``invalid``, its reason shown); the web
server only refuses a body of the wrong shape (422, nothing sent).

An allow-list is set whole (``SetImages`` replaces it, as ``fgpu admin images allow``
does): the page's form starts from the list as read, so adding or removing an entry is
that list with it or without it. ``images`` null drops the allow-list (``allow-all``).

Who may use each route (``tests/api/test_ui.py`` lists them, ``tests/api/test_ui_admin.py``
tries them): a browser session of a domain admin or a superadmin, with its CSRF token and
from this origin; a user's is refused (403), an anonymous one's (401).
- ``POST /ui/admin/images/{domain}``: set the domain's allow-list (``fgpu admin images
  allow``), or drop it (``images: null``: ``fgpu admin images allow-all``);
- ``POST /ui/admin/images/{domain}/aliases``: a request for ``alias`` runs ``image``
  (``fgpu admin images alias``);
- ``DELETE /ui/admin/images/{domain}/aliases/{alias}``: remove an alias (``fgpu admin
  images unalias``; the alias may hold a ``/``).
"""

from typing import Annotated

from fastapi import FastAPI
from pydantic import BaseModel, Field

from events import SetImageAlias, SetImages
from services.api.ui_admin import AdminDone, Administrator, Registrar

__all__ = ["AllowList", "NewAlias", "mount"]

_REF = Field(min_length=1, max_length=256)


class AllowList(BaseModel):
    """What a domain may run: each entry a name (every tag of it) or NAME:TAG."""

    images: list[Annotated[str, _REF]] | None = Field(
        max_length=256, description="null: any image (no allow-list); []: none"
    )
    request_id: str | None = Field(default=None, max_length=64)


class NewAlias(BaseModel):
    """``fgpu admin images alias``'s: a request for ``alias`` runs ``image``."""

    alias: str = _REF
    image: str = _REF
    request_id: str | None = Field(default=None, max_length=64)


def mount(app: FastAPI, ask: Registrar) -> None:
    """The image changes on ``app``."""

    @app.post("/ui/admin/images/{domain}", include_in_schema=False)
    async def set_images(domain: str, form: AllowList, who: Administrator) -> AdminDone:
        """Set (or drop) ``domain``'s allow-list (``fgpu admin images allow|allow-all``)."""
        images = None if form.images is None else tuple(form.images)
        return await ask(who, SetImages(domain=domain, images=images), form.request_id)

    @app.post("/ui/admin/images/{domain}/aliases", include_in_schema=False)
    async def set_alias(domain: str, form: NewAlias, who: Administrator) -> AdminDone:
        """In ``domain``, a request for the alias runs the image (``images alias``)."""
        command = SetImageAlias(domain=domain, alias=form.alias, image=form.image)
        return await ask(who, command, form.request_id)

    @app.delete("/ui/admin/images/{domain}/aliases/{alias:path}", include_in_schema=False)
    async def remove_alias(domain: str, alias: str, who: Administrator) -> AdminDone:
        """Remove an alias of ``domain`` (``fgpu admin images unalias``)."""
        return await ask(who, SetImageAlias(domain=domain, alias=alias), None)
