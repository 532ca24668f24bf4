"""``fgpu secret ...``: your named secrets, for sessions' and pipelines' environments
(docs/pipelines.md, "Secrets").

``set`` reads the value from standard input (piped, or typed at a prompt that does not
echo it), never from an argument (it would stay in the shell's history and in the
process list), seals it to the cluster's secrets key (the read API says it) and hands
the sealed value in on your own connection, as every request of yours; ``rm`` removes
one; ``ls`` lists names, versions and when each was set, never a value.
"""

import base64
import sys
from typing import Annotated

import typer

from services.cli.options import Settings, api_errors, fail, out, print_json, said
from services.cli.outcome import RequestIdOpt, chosen_request_id, sent

__all__ = ["SecretRefsOpt", "app", "secret_refs"]

app = typer.Typer(help="Your secrets: named values kept off the log.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
NameArg = Annotated[str, typer.Argument(help="The secret's name (letters, digits, . - _).")]
MAX_VALUE = 4096  # bytes
# What a session or a revision of an endpoint refers to (``session create``, ``serve
# create|update``): the agent opens the value in the container, only the name travels.
SecretRefsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="VARIABLE=NAME: the variable holds your secret NAME's value (fgpu secret set "
        "NAME), put there by the agent at the start; only the name is sent. Again for more.",
    ),
]


def secret_refs(given: list[str]) -> tuple[tuple[str, str], ...]:
    """``--secret VAR=NAME`` as asked, sorted (the rules are the request's judge's)."""
    refs = []
    for g in given:
        var, eq, name = g.partition("=")
        if not eq or not var or not name:
            fail(f"--secret {g!r}: give VARIABLE=NAME, NAME one of your secrets (fgpu secret ls)")
        refs.append((var, name))
    return tuple(sorted(refs))


def _settings(ctx: typer.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def _name(name: str) -> str:
    from services.domain.secrets import name_problem

    problem = name_problem(name)
    if problem is not None:
        fail(problem)
    return name


def _value() -> str:
    """The value from standard input (its one trailing newline dropped), or typed at a
    prompt that does not echo it. Exits 2 if it is empty, too long or not text."""
    if sys.stdin.isatty():
        import getpass

        text = getpass.getpass("value (not shown): ")
    else:
        data = sys.stdin.buffer.read(MAX_VALUE + 2)
        try:
            text = data.decode()
        except UnicodeDecodeError:
            fail("a secret's value is text (UTF-8)")
        text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        fail("no value: pipe it in, or type it at the prompt")
    if len(text.encode()) > MAX_VALUE:
        fail(f"a secret's value is at most {MAX_VALUE} bytes")
    return text


def _public_key(settings: Settings) -> bytes:
    if settings.api_url is None:
        fail("fgpu secret set needs the read API (--api): it says the cluster's secrets key")
    with api_errors():
        body = settings.read_api().get("/v1/secrets/key")
    return base64.b64decode(body["public_key"])


def _sent(settings: Settings, request_id: str | None, send_id: str, sealed: bytes | None) -> str:
    """The set (``sealed``) or removal (None) of secret ``send_id``, sent on the user's own
    connection; its request's id. Exits 1 with one line if refused or unknown."""
    from services.cli.options import user_client

    rid = chosen_request_id(request_id)

    async def publish() -> str:
        async with user_client(settings) as client:
            if sealed is None:
                return await client.secret_remove(send_id, request_id=rid)
            return await client.secret_set(send_id, sealed, request_id=rid)

    return sent(settings, publish, f"--request-id {rid}")


@app.command("set")
def set_secret(
    ctx: typer.Context,
    name: NameArg,
    given: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
    request_id: RequestIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a secret (a new version of it) from standard input, or typed at a prompt."""
    from services.adapters.sealed_box import seal

    if given:
        fail(
            "a secret's value is never an argument (it would stay in your shell's history "
            f"and the process list): pipe it in (... | fgpu secret set {name}) or type it "
            "at the prompt"
        )
    name = _name(name)
    settings = _settings(ctx)
    sealed = seal(_public_key(settings), _value())
    asked = _sent(settings, request_id, name, sealed)
    said(as_json, {"name": name, "request": asked}, f"secret {name} set")


@app.command("rm")
def rm(
    ctx: typer.Context, name: NameArg, request_id: RequestIdOpt = None, as_json: JsonOpt = False
) -> None:
    """Remove a secret of yours: no session may refer to it any more."""
    name = _name(name)
    asked = _sent(_settings(ctx), request_id, name, None)
    said(as_json, {"name": name, "request": asked}, f"secret {name} removed")


@app.command("ls")
def ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Your secrets: names, versions, when each was set (never a value)."""
    with api_errors():
        body = _settings(ctx).read_api().get("/v1/secrets")
    if as_json:
        print_json(body)
        return
    for s in body["secrets"]:
        out().print(f"{s['name']}  version {s['version']}  set {s['set_at']}", highlight=False)
