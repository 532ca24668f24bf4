"""``fgpu pipeline ...``: DAGs of batch sessions from a YAML file (docs/pipelines.md).

``schema`` and ``validate`` read nothing but the file (``validate`` also asks the read
API, when one is known, to check each task against the user's rights). ``run``,
``cancel`` and ``rerun`` are requests on the user's own subjects, handed to the intake
as ``session create``'s are; ``ls`` and ``info`` read the read API.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.options import Settings, fail, out, print_json

if TYPE_CHECKING:
    from events import PipelineSpec

__all__ = ["app"]

app = typer.Typer(help="Pipelines: DAGs of batch sessions from a YAML file.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
FileArg = Annotated[Path, typer.Argument(help="The pipeline's YAML file.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option(help="A project of yours, by name (default: your default project)."),
]


def _settings(ctx: typer.Context) -> Settings:
    s: Settings = ctx.obj
    return s


@app.command("schema")
def schema() -> None:
    """The JSON Schema of a pipeline document."""
    from services.domain.pipelines.document import document_schema

    print_json(document_schema())


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{path}: {e.strerror if isinstance(e, OSError) else 'not text'}")


def _checked(ctx: typer.Context, path: Path) -> "PipelineSpec":
    """The spec in ``path``; exits 2 with every problem, one a line."""
    from services.domain.pipelines.check import check_text

    settings = _settings(ctx)
    spec, problems = check_text(_read(path), settings.access_key)
    if problems or spec is None:
        for p in problems[:-1]:
            typer.echo(f"error: {p}", err=True)
        fail(problems[-1])
    return spec


@app.command("validate")
def validate(ctx: typer.Context, path: FileArg, as_json: JsonOpt = False) -> None:
    """Check a pipeline: its fields, its graph (a cycle is named with its tasks), each
    task as the quota actor reads a request. Exits 2 with every problem, one a line."""
    spec = _checked(ctx, path)
    order = [t.name for t in spec.tasks]
    if as_json:
        print_json({"name": spec.name, "tasks": order, "problems": []})
        return
    out().print(f"{spec.name}: {len(order)} tasks, valid", highlight=False)
