"""``fgpu serve ...``: model serving endpoints (``docs/serving.md``).

Every change is the user's own request on the user's own connection (as ``fgpu admin``
sends its: ``tenancy_cmd.ask``), judged by the serving actor, and the command waits for
its answer; a refusal exits 1 with the reason. Reads (``ls``, ``info``) ask the read
API, which shows only the endpoints the user may see. A token is made here, shown once,
and only its SHA-256 is sent.
"""

import secrets
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from events import AutoscaleMetric
from services.cli.options import Settings, api_errors, fail, out, print_json
from services.cli.outcome import RequestIdOpt
from services.cli.secret_cmd import SecretRefsOpt, secret_refs
from services.cli.tenancy_cmd import JsonOpt, TimeoutOpt, ask, listed

if TYPE_CHECKING:
    from collections.abc import Callable

    from events import RevisionSpec, ServeCommand

__all__ = ["app"]

app = typer.Typer(help="Model serving: endpoints, their replicas and tokens.", no_args_is_help=True)
token_app = typer.Typer(help="Tokens that open a private endpoint.", no_args_is_help=True)
app.add_typer(token_app, name="token")

ImageOpt = Annotated[str, typer.Option(help="The model server's image.")]
PortOpt = Annotated[int, typer.Option(help="The port it answers HTTP on in its container.")]
FgpuOpt = Annotated[
    str | None, typer.Option(help="fGPU of each replica (0.25, 1); none with --cpu-only.")
]
CpuOpt = Annotated[str, typer.Option(help="CPU cores of each replica (1, 0.5, 250m).")]
MemOpt = Annotated[str, typer.Option(help="Memory of each replica (1g, 512m).")]
CpuOnlyOpt = Annotated[bool, typer.Option("--cpu-only", help="No GPU (then give no --fgpu).")]
ModelOpt = Annotated[
    str | None, typer.Option(help="A folder of yours mounted read-only at /home/work/NAME.")
]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", help="NAME=VALUE; again for more.")]
HealthOpt = Annotated[str, typer.Option(help="The path its health check asks (GET).")]
DrainOpt = Annotated[
    float,
    typer.Option(min=0, max=3600, help="Seconds a draining replica finishes its requests."),
]
WarmupOpt = Annotated[
    float,
    typer.Option(min=0, max=3600, help="Seconds a replica has to become healthy (0: no limit)."),
]


METRICS: dict[str, AutoscaleMetric] = {m: m for m in get_args(AutoscaleMetric)}
CommandArg = Annotated[list[str] | None, typer.Argument(help="Its command (after --).")]


@app.callback()
def _serve_options(ctx: typer.Context, request_id: RequestIdOpt = None) -> None:
    """Model serving. Each change is a request; sent again with the same --request-id
    (before the command), it is done once."""
    settings: Settings = ctx.obj
    settings.request_id = request_id


def _spec(
    image: str,
    command: list[str] | None,
    port: int,
    amounts: tuple[str | None, str, str, bool],
    model: str | None,
    env: tuple[list[str] | None, list[str] | None],
    health: str,
    timing: tuple[float, float] = (0.0, 0.0),
) -> "RevisionSpec":
    """A revision from the options (exits 2 with one line on a bad one)."""
    from events import HealthSpec, RevisionSpec, Slots
    from services.domain.resources import InvalidAmount, parse_cpu, parse_fgpu, parse_mem

    fgpu, cpu, mem, cpu_only = amounts
    if cpu_only == (fgpu is not None):
        fail("give --fgpu (each replica's fGPU), or --cpu-only")
    try:
        quanta = 0 if fgpu is None else parse_fgpu(fgpu)
        slots = Slots(cpu=parse_cpu(cpu), mem=parse_mem(mem), fgpu=quanta)
    except InvalidAmount as e:
        fail(str(e))
    clear, secret = env
    pairs = []
    for item in clear or []:
        name, eq, value = item.partition("=")
        if not eq:
            fail(f"--env {item!r}: NAME=VALUE")
        pairs.append((name, value))
    return RevisionSpec(
        image=image,
        command=tuple(command or ()),
        port=port,
        model=model,
        slots=slots,
        cpu_only=cpu_only,
        env=tuple(sorted(pairs)),
        secret_env=secret_refs(secret or []),
        health=HealthSpec(path=health),
        drain_s=timing[0],
        warmup_s=timing[1],
    )


def _endpoint(ctx: typer.Context, ref: str) -> dict[str, Any]:
    """The endpoint ``ref`` (its name or id) as the read API shows it to the user."""
    from services.cli.api_client import ApiError

    try:
        found: dict[str, Any] = _settings(ctx).read_api().get(f"/v1/endpoints/{ref}")
    except ApiError as e:
        if e.status == 404:
            fail(f"no endpoint {ref!r} of yours")
        raise
    return found


def _settings(ctx: typer.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def _done(answer: dict[str, Any], text: str, as_json: bool, **extra: Any) -> None:
    if as_json:
        print_json({**answer, **extra})
    else:
        out().print(text, highlight=False)


def _change(
    ctx: typer.Context,
    endpoint: str,
    command: "Callable[[str], ServeCommand]",
    said: str,
    timeout: float,
    as_json: bool,
) -> None:
    """Ask ``command(endpoint id)`` of the endpoint the user calls ``endpoint``, and say
    ``said`` (its ``{name}`` the endpoint's) once applied."""
    with api_errors():
        ep = _endpoint(ctx, endpoint)
    answer = ask(ctx, command(ep["endpoint_id"]), timeout)
    _done(answer, said.format(name=ep["name"]), as_json)


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="1-63 lower-case letters, digits and '-'.")],
    image: ImageOpt,
    command: CommandArg = None,
    port: PortOpt = 8000,
    fgpu: FgpuOpt = None,
    cpu: CpuOpt = "1",
    mem: MemOpt = "1g",
    cpu_only: CpuOnlyOpt = False,
    model: ModelOpt = None,
    env: EnvOpt = None,
    secret: SecretRefsOpt = None,
    health: HealthOpt = "/health",
    drain: DrainOpt = 10.0,
    warmup: WarmupOpt = 600.0,
    replicas: Annotated[int, typer.Option(min=0, max=64, help="How many replicas.")] = 1,
    project: Annotated[str | None, typer.Option(help="A project of yours.")] = None,
    group: Annotated[str | None, typer.Option(help="The resource group.")] = None,
    public: Annotated[bool, typer.Option(help="Anyone may call it (no token).")] = False,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Create an endpoint served under /e/NAME/ of every proxy."""
    from events import CreateEndpoint

    amounts = (fgpu, cpu, mem, cpu_only)
    spec = _spec(image, command, port, amounts, model, (env, secret), health, (drain, warmup))
    endpoint_id = f"ep-{secrets.token_hex(8)}"
    c = CreateEndpoint(
        endpoint_id=endpoint_id,
        name=name,
        project=project,
        group=group,
        public=public,
        revision=spec,
        replicas=replicas,
    )
    answer = ask(ctx, c, timeout)
    _done(answer, f"endpoint {name} created ({endpoint_id}): /e/{name}/", as_json, id=endpoint_id)


@app.command("ls")
def ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Your endpoints (an administrator: its domain's)."""
    found = listed(ctx, "/v1/endpoints")
    if as_json:
        print_json(found)
        return
    from rich.table import Table

    table = Table("name", "id", "owner", "revision", "wanted", "healthy", "public")
    for ep in found["endpoints"]:
        healthy = sum(r["phase"] == "healthy" and r["in_rotation"] for r in ep["replicas"])
        top = max(ep["targets"], key=lambda t: t["traffic"], default=None)
        table.add_row(
            ep["name"],
            ep["endpoint_id"],
            ep["owner"],
            "-" if top is None else str(top["revision"]),
            str(sum(t["replicas"] for t in ep["targets"])),
            str(healthy),
            "yes" if ep["public"] else "no",
        )
    out().print(table)


@app.command("info")
def info(ctx: typer.Context, endpoint: str, as_json: JsonOpt = False) -> None:
    """One endpoint: its revisions, targets, replicas and tokens."""
    with api_errors():
        ep = _endpoint(ctx, endpoint)
    if as_json:
        print_json(ep)
        return
    say = out().print
    say(f"{ep['name']} ({ep['endpoint_id']}) of {ep['owner']}, {ep['path']}", highlight=False)
    for r in ep["revisions"]:
        held = ", ".join(f"{s['variable']}={s['secret']}" for s in r.get("secrets", ()))
        secrets_said = f", secrets {held}" if held else ""
        say(
            f"  revision {r['revision']}: {r['image']} port {r['port']}{secrets_said}",
            highlight=False,
        )
    for t in ep["targets"]:
        say(f"  wants {t['replicas']} of revision {t['revision']}", highlight=False)
    for r in ep["replicas"]:
        where = f"{r['host']}:{r['port']}" if r["host"] else "-"
        state = r["phase"] + (" in rotation" if r["in_rotation"] else "")
        say(f"  replica {r['session_id']} r{r['revision']}/{r['ordinal']} {state} {where}")
    rule = ep.get("autoscale")
    if rule:
        say(
            f"  autoscale by {rule['metric']}: up above {rule['up']:g}, down below "
            f"{rule['down']:g}, {rule['min_replicas']}-{rule['max_replicas']} replicas, "
            f"step {rule['step']}, cooldown {rule['cooldown_s']:g} s"
            + (
                f", cold start up to {rule['cold_start_s']:g} s"
                if rule["min_replicas"] == 0
                else ""
            ),
            highlight=False,
        )
    for slot, why in ep["stalled"].items():
        say(f"  slot {slot} stalled: {why}", highlight=False)
    for tok in ep["tokens"]:
        say(
            f"  token {tok['token_id']} until {tok['expires_at']}" + (" (revoked)" * tok["revoked"])
        )


@app.command("scale")
def scale(
    ctx: typer.Context,
    endpoint: str,
    replicas: Annotated[int, typer.Argument(min=0, max=64)],
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Run this many replicas of the revision taking the traffic."""
    from events import ScaleEndpoint

    def command(endpoint_id: str) -> ScaleEndpoint:
        return ScaleEndpoint(endpoint_id=endpoint_id, replicas=replicas)

    _change(ctx, endpoint, command, f"endpoint {{name}}: {replicas} replicas", timeout, as_json)


@app.command("rm")
def rm(
    ctx: typer.Context, endpoint: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False
) -> None:
    """Remove an endpoint: its replicas are drained and stopped, its name freed."""
    from events import RemoveEndpoint

    def command(endpoint_id: str) -> RemoveEndpoint:
        return RemoveEndpoint(endpoint_id=endpoint_id)

    _change(ctx, endpoint, command, "endpoint {name} removed", timeout, as_json)


@app.command("autoscale")
def autoscale(
    ctx: typer.Context,
    endpoint: str,
    metric: Annotated[
        str | None,
        typer.Option(help="What the thresholds are about: " + ", ".join(METRICS) + "."),
    ] = None,
    up: Annotated[float | None, typer.Option(help="Above it, a step up.")] = None,
    down: Annotated[
        float | None, typer.Option(help="Below it all the cooldown, a step down.")
    ] = None,
    min_replicas: Annotated[int, typer.Option("--min", help="Fewest replicas (0: to zero).")] = 1,
    max_replicas: Annotated[int | None, typer.Option("--max", help="Most replicas.")] = None,
    step: Annotated[int, typer.Option(help="Replicas added or taken away at once.")] = 1,
    cooldown: Annotated[float, typer.Option(help="Seconds between changes.")] = 60.0,
    cold_start: Annotated[
        float, typer.Option(help="Seconds a request waits for a replica at zero.")
    ] = 30.0,
    off: Annotated[bool, typer.Option("--off", help="No autoscaling (replicas stay).")] = False,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Set the replicas from the traffic the proxies count: a rule, or --off."""
    from events import AutoscaleRule, SetAutoscale
    from services.domain.serving.rules import rule_problem

    rule: AutoscaleRule | None = None
    if off:
        if metric is not None or up is not None or down is not None or max_replicas is not None:
            fail("--off takes no rule")
    else:
        if metric is None or up is None or down is None or max_replicas is None:
            fail("give --metric, --up, --down and --max (or --off)")
        if metric not in METRICS:
            fail(f"--metric {metric!r}: one of " + ", ".join(METRICS))
        rule = AutoscaleRule(
            metric=METRICS[metric],
            up=up,
            down=down,
            step=step,
            cooldown_s=cooldown,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            cold_start_s=cold_start,
        )
        problem = rule_problem(rule)
        if problem is not None:
            fail(problem)

    def command(endpoint_id: str) -> SetAutoscale:
        return SetAutoscale(endpoint_id=endpoint_id, rule=rule)

    said = "endpoint {name}: " + (
        "no autoscaling" if rule is None else f"autoscaled by {rule.metric}"
    )
    _change(ctx, endpoint, command, said, timeout, as_json)


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    endpoint: str,
    days: Annotated[float, typer.Option(min=0.001, max=3650, help="Days it is good for.")] = 30,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Make a token for a private endpoint: shown here, once, and never again."""
    from events import CreateToken

    with api_errors():
        ep = _endpoint(ctx, endpoint)
    from services.domain.serving.tokens import new_token

    token, token_id, digest = new_token()
    until = datetime.now(UTC) + timedelta(days=days)
    c = CreateToken(
        endpoint_id=ep["endpoint_id"], token_id=token_id, sha256=digest, expires_at=until
    )
    answer = ask(ctx, c, timeout)
    text = f"token {token_id} for {ep['name']} until {until.isoformat()}:\n{token}"
    _done(answer, text, as_json, token_id=token_id, token=token, expires_at=until.isoformat())


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    endpoint: str,
    token_id: str,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token: proxies refuse it from their next table."""
    from events import RevokeToken

    def command(endpoint_id: str) -> RevokeToken:
        return RevokeToken(endpoint_id=endpoint_id, token_id=token_id)

    _change(ctx, endpoint, command, f"token {token_id} of {{name}} revoked", timeout, as_json)
