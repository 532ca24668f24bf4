"""``fgpu login`` and ``fgpu whoami``: the keypair this CLI speaks as."""

from typing import Annotated

import typer

from services.cli.options import Settings, fail, out, print_json
from services.cli.tenancy_cmd import JsonOpt, listed, store_keypair

__all__ = ["app"]

app = typer.Typer()  # no group of its own: main puts these beside its own commands


@app.command("login")
def login(
    access_key: Annotated[str, typer.Option(help="Your access key.")],
    secret_stdin: Annotated[
        bool, typer.Option("--secret-stdin", help="Read the secret from standard input.")
    ] = False,
) -> None:
    """Store your keypair (mode 0600) for the commands that follow. The secret is asked
    for, never taken on the command line (every local user can read that)."""
    import getpass
    import sys

    secret = sys.stdin.readline().strip() if secret_stdin else getpass.getpass("secret key: ")
    if not secret:
        fail("no secret given")
    store_keypair(access_key, secret)


@app.command("whoami")
def whoami(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The access key this CLI speaks as, and whose it is (from the read API)."""
    settings: Settings = ctx.obj
    keys = {k["access_key"]: k for k in listed(ctx, "/v1/keypairs")}
    mine = keys.get(settings.access_key)
    found = {
        "access_key": settings.access_key,
        "secret": settings.secret_key is not None,
        "user": mine["user"] if mine else None,
        "revoked": mine["revoked"] if mine else None,
    }
    if as_json:
        print_json(found)
    elif mine is None:
        out().print(f"{settings.access_key} (no keypair the cluster knows)", highlight=False)
    else:
        state = ", revoked" if mine["revoked"] else ""
        out().print(
            f"{settings.access_key}: {mine['user'] or mine['service']}{state}", highlight=False
        )
