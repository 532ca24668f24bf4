"""``fgpu admin images ...``: what each domain may run (an allow-list) and the aliases its
requests may name.

A change is an admin request the registrar applies or refuses (its domain's admins and
superadmins may; docs/images.md), said as every ``fgpu admin`` change is.
"""

from typing import Annotated

import typer

from services.cli.options import out, print_json
from services.cli.tenancy_cmd import JsonOpt, TimeoutOpt, ask, listed, said

__all__ = ["app"]

app = typer.Typer(
    help="Which images a domain may run, and its aliases (its admins, superadmins).",
    no_args_is_help=True,
)


@app.command("allow")
def images_allow(
    ctx: typer.Context,
    domain: str,
    images: Annotated[list[str], typer.Argument(help="NAME (every tag) or NAME:TAG.")],
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Let sessions of DOMAIN run only these images (replaces its allow-list)."""
    from events import SetImages

    answer = ask(ctx, SetImages(domain=domain, images=tuple(images)), timeout)
    said(answer, f"domain {domain} may run {', '.join(images)}", as_json)


@app.command("allow-all")
def images_allow_all(
    ctx: typer.Context, domain: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False
) -> None:
    """Drop DOMAIN's allow-list: its sessions may run any image again."""
    from events import SetImages

    answer = ask(ctx, SetImages(domain=domain, images=None), timeout)
    said(answer, f"domain {domain} may run any image", as_json)


@app.command("alias")
def images_alias(
    ctx: typer.Context,
    domain: str,
    alias: str,
    image: str,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """In DOMAIN, a request for ALIAS runs IMAGE (python -> fgpu/python:3.11)."""
    from events import SetImageAlias

    answer = ask(ctx, SetImageAlias(domain=domain, alias=alias, image=image), timeout)
    said(answer, f"in domain {domain}, {alias} runs {image}", as_json)


@app.command("unalias")
def images_unalias(
    ctx: typer.Context,
    domain: str,
    alias: str,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Remove an alias of DOMAIN."""
    from events import SetImageAlias

    answer = ask(ctx, SetImageAlias(domain=domain, alias=alias), timeout)
    said(answer, f"alias {alias} of domain {domain} removed", as_json)


@app.command("ls")
def images_policies(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Each domain's allow-list and aliases (superadmins: every domain; else one's own)."""
    found = listed(ctx, "/v1/image-policies")
    assert isinstance(found, list)
    if as_json:
        print_json(found)
        return
    for p in found:
        allowed = "any image" if p["images"] is None else ", ".join(p["images"]) or "no image"
        aliases = ", ".join(f"{a} -> {i}" for a, i in p["aliases"].items())
        out().print(
            f"{p['domain']}: {allowed}" + (f"; aliases {aliases}" if aliases else ""),
            highlight=False,
        )
