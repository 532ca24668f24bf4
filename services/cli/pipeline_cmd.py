"""``fgpu pipeline ...``: DAGs of batch sessions from a YAML file (docs/pipelines.md).

``schema`` and ``validate`` read nothing but the file (``validate`` also asks the read
API, when one is known, to check each task against the user's rights). ``run``,
``cancel`` and ``rerun`` are requests on the user's own subjects, handed to the intake
as ``session create``'s are; ``ls`` and ``info`` read the read API.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.options import Settings, api_errors, fail, out, print_json, said
from services.cli.outcome import RequestIdOpt, chosen_request_id, sent

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from events import PipelineSpec
    from services.client import Client

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


def _rights_problems(ctx: typer.Context, spec: "PipelineSpec", project: str | None) -> list[str]:
    """What your rights refuse of ``spec``'s tasks (``limits.spec_problems``, against your
    limits as the read API says them); none asked when no read API is known."""
    import msgspec

    from services.domain.pipelines.limits import Limits, spec_problems

    settings = _settings(ctx)
    if settings.api_url is None:
        return []
    params = {} if project is None else {"project": project}
    with api_errors():
        body = settings.read_api().get("/v1/pipelines/limits", params)
    try:
        limits = msgspec.convert(body, Limits)
    except msgspec.ValidationError as e:
        fail(f"the read API's limits are of no known form: {e}", code=1)
    problems = spec_problems(spec, settings.access_key, limits)
    if any(v.secret for v in spec.environment) or any(t.environment for t in spec.tasks):
        from services.domain.pipelines.check import secret_problems

        with api_errors():
            mine = settings.read_api().get("/v1/secrets")["secrets"]
        problems += secret_problems(spec, {s["name"] for s in mine})
    return problems


@app.command("validate")
def validate(
    ctx: typer.Context, path: FileArg, project: ProjectOpt = None, as_json: JsonOpt = False
) -> None:
    """Check a pipeline: its fields, its graph (a cycle is named with its tasks), each
    task as the quota actor reads a request, and (through the read API, when one is
    known) each task against your rights: your policies, the resource groups open to
    your project, the largest agent of each group, and the secrets it refers to, each
    one of yours. Exits 2 with every problem, one a line."""
    spec = _checked(ctx, path)
    problems = _rights_problems(ctx, spec, project)
    if problems:
        for p in problems[:-1]:
            typer.echo(f"error: {p}", err=True)
        fail(problems[-1])
    order = [t.name for t in spec.tasks]
    if as_json:
        print_json({"name": spec.name, "tasks": order, "problems": []})
        return
    out().print(f"{spec.name}: {len(order)} tasks, valid", highlight=False)


RunArg = Annotated[str, typer.Argument(help="The run's id (as `fgpu pipeline ls` shows it).")]


def _run_id(run_id: str) -> str:
    from events import subjects as subj

    if not subj.is_token(run_id):
        fail(f"{run_id!r} is not a run id")
    return run_id


@app.command("run")
def run(
    ctx: typer.Context,
    path: FileArg,
    project: ProjectOpt = None,
    request_id: RequestIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a pipeline: checked as `validate` checks it, then asked for in your name (its
    sessions are admitted against your rights as each task's turn comes). Sent again with
    the same --request-id, the same run, once."""
    settings = _settings(ctx)
    spec = _checked(ctx, path)
    user = _user(settings)
    chosen = chosen_request_id(request_id)
    run_id = _sent(
        settings,
        chosen,
        lambda c, rid: c.pipeline_run(spec, project=project, request_id=rid, folder_of=user),
    )
    if as_json:
        print_json({"run_id": run_id, "name": spec.name, "request_id": chosen})
    else:
        out().print(run_id, highlight=False)


def _sent(
    settings: Settings, request_id: str | None, send: "Callable[[Client, str], Awaitable[str]]"
) -> str:
    """``send`` (one request of the user's, given its request id) on the user's own
    connection; what it answers. Exits 1 with one line if it was refused or its outcome is
    unknown (saying the request id to send it again with)."""
    from services.cli.options import user_client

    rid = chosen_request_id(request_id)

    async def publish() -> str:
        async with user_client(settings) as client:
            return await send(client, rid)

    return sent(settings, publish, f"--request-id {rid}")


def _user(settings: Settings) -> str | None:
    """The signed-in user, whose the run's folder is; None (with a warning) where there
    is none to ask or none is known: the run then has no folder at /pipeline."""
    from services.cli.api_client import ApiError, ApiUnreachable
    from services.cli.options import warn

    if settings.api_url is None:
        warn("no read API known: the run gets no folder at /pipeline")
        return None
    try:
        user = settings.read_api().get("/v1/auth/whoami").get("user")
    except (ApiError, ApiUnreachable, ValueError) as e:
        warn(f"the read API did not say who you are ({e}): the run gets no folder at /pipeline")
        return None
    if user is None:
        warn("no user signed in (a cluster without tenancy): the run gets no folder at /pipeline")
    return str(user) if user is not None else None


@app.command("cancel")
def cancel(
    ctx: typer.Context, run_id: RunArg, request_id: RequestIdOpt = None, as_json: JsonOpt = False
) -> None:
    """Cancel a run: no task is asked for any more, and its running sessions are asked to
    end (yours only)."""
    settings = _settings(ctx)
    run_id = _run_id(run_id)
    asked = _sent(settings, request_id, lambda c, rid: c.pipeline_cancel(run_id, request_id=rid))
    said(as_json, {"run_id": run_id, "request": asked}, f"cancel of {run_id} asked")


@app.command("rerun")
def rerun(
    ctx: typer.Context,
    run_id: RunArg,
    from_task: Annotated[str, typer.Option("--from", help="The task to run again from.")],
    request_id: RequestIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run an ended run again from a task: it and every task after it, in the same run
    (and its folder); the others keep their outcome."""
    settings = _settings(ctx)
    run_id = _run_id(run_id)
    asked = _sent(
        settings, request_id, lambda c, rid: c.pipeline_rerun(run_id, from_task, request_id=rid)
    )
    said(as_json, {"run_id": run_id, "request": asked}, f"rerun of {run_id} from {from_task} asked")


@app.command("ls")
def ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Your runs (a domain admin: its domain's), newest first."""
    from services.cli.render import runs_table

    with api_errors():
        page = _settings(ctx).read_api().get("/v1/pipelines")
    if as_json:
        print_json(page)
    else:
        out().print(runs_table(page["runs"]))


@app.command("info")
def info(ctx: typer.Context, run_id: RunArg, as_json: JsonOpt = False) -> None:
    """One run: its DAG, each task with its state, attempt and session."""
    from services.cli.render import run_lines

    run_id = _run_id(run_id)
    with api_errors():
        shown = _settings(ctx).read_api().get(f"/v1/pipelines/{run_id}")
    if as_json:
        print_json(shown)
    else:
        for line in run_lines(shown):
            out().print(line, highlight=False)


@app.command("schedule")
def schedule(
    ctx: typer.Context,
    path: FileArg,
    cron: Annotated[
        str, typer.Option("--cron", help="When, in UTC: minute hour day month weekday.")
    ],
    project: ProjectOpt = None,
    request_id: RequestIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a pipeline at each time CRON names, as yours: each run checked against your
    rights when its time comes (a revoked key's are refused). Prints the schedule's id."""
    from services.domain.pipelines.schedules import cron_problem

    settings = _settings(ctx)
    problem = cron_problem(cron)
    if problem is not None:
        fail(problem)
    spec = _checked(ctx, path)
    schedule_id = _sent(
        settings,
        request_id,
        lambda c, rid: c.pipeline_schedule(spec, cron, project=project, request_id=rid),
    )
    said(as_json, {"schedule_id": schedule_id, "cron": cron}, schedule_id)


@app.command("unschedule")
def unschedule(
    ctx: typer.Context,
    schedule_id: Annotated[str, typer.Argument(help="The schedule's id.")],
    request_id: RequestIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop a schedule of yours: no more runs from it (those running go on)."""
    settings = _settings(ctx)
    schedule_id = _run_id(schedule_id)
    asked = _sent(
        settings, request_id, lambda c, rid: c.pipeline_unschedule(schedule_id, request_id=rid)
    )
    said(as_json, {"schedule_id": schedule_id, "request": asked}, f"{schedule_id} unscheduled")
