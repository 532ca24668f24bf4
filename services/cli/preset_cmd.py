"""``fgpu admin preset ...``: resource presets, names for amounts a launch may fill in
(the web UI's launch form offers them).

A change is an admin request the registrar applies or refuses, as every tenancy command
(``tenancy_cmd.ask``): a domain's presets are its admins' (and superadmins'), the presets
of every domain a superadmin's. Anyone lists those offered to it.
"""

from typing import Annotated

import typer

from services.cli.options import fail, out, print_json
from services.cli.tenancy_cmd import JsonOpt, TimeoutOpt, ask, listed, said

__all__ = ["app"]

app = typer.Typer(
    help="Resource presets: named amounts a launch may fill in.", no_args_is_help=True
)

DomainOpt = Annotated[
    str | None,
    typer.Option(help="The domain it is offered in (its admins'). [default: every domain]"),
]


@app.command("create")
def preset_create(
    ctx: typer.Context,
    name: str,
    cpu: Annotated[str, typer.Option(help="CPU cores (1, 0.5, 250m).")],
    mem: Annotated[str, typer.Option(help="Memory (512m, 1g).")],
    fgpu: Annotated[str, typer.Option(help="fGPU (0.5, 2); 0: no GPU.")] = "0",
    group: Annotated[
        str | None, typer.Option(help="Offered for this resource group only. [default: any]")
    ] = None,
    domain: DomainOpt = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Define a preset NAME (a domain's admins for their domain; superadmins any)."""
    from events import CreatePreset, Slots
    from services.domain.resources import InvalidAmount, parse_cpu, parse_fgpu, parse_mem

    try:
        slots = Slots(cpu=parse_cpu(cpu), mem=parse_mem(mem), fgpu=parse_fgpu(fgpu, zero=True))
    except InvalidAmount as e:
        fail(str(e))
    command = CreatePreset(name=name, slots=slots, domain=domain, group=group)
    answer = ask(ctx, command, timeout)
    said(answer, f"preset {name} defined", as_json)


@app.command("rm")
def preset_rm(
    ctx: typer.Context,
    name: str,
    domain: DomainOpt = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Remove preset NAME (of DOMAIN, else of every domain)."""
    from events import RemovePreset

    answer = ask(ctx, RemovePreset(name=name, domain=domain), timeout)
    said(answer, f"preset {name} removed", as_json)


@app.command("ls")
def preset_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The presets offered to you (a superadmin: every domain's)."""
    from services.domain.resources import format_mem

    found = listed(ctx, "/v1/presets")
    if as_json:
        print_json(found)
        return
    for p in found:
        s = p["slots"]
        where = p["domain"] or "every domain"
        group = f", group {p['group']}" if p["group"] else ""
        out().print(
            f"{p['name']} ({where}{group}): {s['fgpu']} fGPU, {s['cpu']} CPU, "
            f"{format_mem(s['mem'])}",
            highlight=False,
        )
