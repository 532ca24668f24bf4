"""``fgpu serve update|rollback|traffic``: new revisions, rolling updates, rollbacks and
traffic splits (``docs/serving.md``, Rolling updates).

Each is the user's own request, judged by the serving actor, as every ``fgpu serve``
change (``serve_cmd``). A rolling update is answered once the rollout has started; its
steps follow as replicas' health comes back (``fgpu serve info`` shows its progress).
"""

from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.options import api_errors, fail
from services.cli.secret_cmd import SecretRefsOpt
from services.cli.serve_cmd import (
    CommandArg,
    CpuOnlyOpt,
    CpuOpt,
    DrainOpt,
    EnvOpt,
    FgpuOpt,
    HealthOpt,
    ImageOpt,
    MemOpt,
    ModelOpt,
    PortOpt,
    WarmupOpt,
    _done,
    _endpoint,
    _spec,
    app,
)
from services.cli.tenancy_cmd import JsonOpt, TimeoutOpt, ask

if TYPE_CHECKING:
    from events import RolloutPolicy, TrafficShare

__all__ = ["rollback", "traffic", "update"]

SurgeOpt = Annotated[
    int, typer.Option(min=0, max=64, help="Replicas above the wanted count during a rollout.")
]
UnavailableOpt = Annotated[
    int, typer.Option(min=0, max=64, help="Healthy replicas below the wanted count, at most.")
]
AtOnceOpt = Annotated[
    bool, typer.Option("--at-once", help="No rolling update: switch every replica now.")
]


def _policy(at_once: bool, surge: int, unavailable: int) -> "RolloutPolicy | None":
    from events import RolloutPolicy

    if at_once:
        return None
    if surge == 0 and unavailable == 0:
        fail("--max-surge and --max-unavailable cannot both be 0: the rollout could not move")
    return RolloutPolicy(max_surge=surge, max_unavailable=unavailable)


@app.command("update")
def update(
    ctx: typer.Context,
    endpoint: str,
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
    max_surge: SurgeOpt = 1,
    max_unavailable: UnavailableOpt = 0,
    at_once: AtOnceOpt = False,
    traffic: Annotated[
        int | None,
        typer.Option(min=0, max=100, help="Blue/green: its share beside the current revision."),
    ] = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """A new revision: rolled out to every replica (or all at once, or beside the
    current one with --traffic)."""
    from events import AddRevision

    with api_errors():
        ep = _endpoint(ctx, endpoint)
    amounts = (fgpu, cpu, mem, cpu_only)
    spec = _spec(image, command, port, amounts, model, (env, secret), health, (drain, warmup))
    policy = None if traffic is not None else _policy(at_once, max_surge, max_unavailable)
    c = AddRevision(endpoint_id=ep["endpoint_id"], revision=spec, rollout=policy, traffic=traffic)
    answer = ask(ctx, c, timeout)
    n = len(ep["revisions"]) + 1
    how = "rolling out" if policy is not None else "at once"
    if traffic is not None:
        how = f"at {traffic}% of the traffic"
    _done(answer, f"endpoint {ep['name']}: revision {n}, {how}", as_json, revision=n)


@app.command("rollback")
def rollback(
    ctx: typer.Context,
    endpoint: str,
    to: Annotated[
        int | None,
        typer.Option(min=1, help="Any of its revisions (default: the one before the current)."),
    ] = None,
    max_surge: SurgeOpt = 1,
    max_unavailable: UnavailableOpt = 0,
    at_once: AtOnceOpt = False,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Roll the endpoint back to an earlier revision (a rolling update to it)."""
    from events import PointEndpoint

    with api_errors():
        ep = _endpoint(ctx, endpoint)
    revision = to if to is not None else _previous(ep)
    policy = _policy(at_once, max_surge, max_unavailable)
    c = PointEndpoint(endpoint_id=ep["endpoint_id"], revision=revision, rollout=policy)
    answer = ask(ctx, c, timeout)
    _done(answer, f"endpoint {ep['name']}: back to revision {revision}", as_json, revision=revision)


def _previous(ep: dict[str, object]) -> int:
    """The revision before the one taking most traffic (exits 2 if there is none)."""
    targets = ep["targets"]
    assert isinstance(targets, list)
    top = max(targets, key=lambda t: (t["traffic"], t["revision"]), default=None)
    current = top["revision"] if top is not None else len(ep["revisions"])  # type: ignore[arg-type]
    if current <= 1:
        fail(f"endpoint {ep['name']} has no revision before {current}: give --to")
    return int(current) - 1


def _shares(pairs: list[str]) -> "tuple[TrafficShare, ...]":
    from events import TrafficShare

    out = []
    for pair in pairs:
        rev, eq, pct = pair.partition("=")
        if not eq or not rev.isdigit() or not pct.isdigit():
            fail(f"{pair!r}: REVISION=PERCENT, as 1=90 2=10")
        out.append(TrafficShare(revision=int(rev), traffic=int(pct)))
    return tuple(out)


@app.command("traffic")
def traffic(
    ctx: typer.Context,
    endpoint: str,
    shares: Annotated[list[str], typer.Argument(help="REVISION=PERCENT, summing to 100.")],
    replicas: Annotated[
        int | None,
        typer.Option(min=0, max=64, help="Replicas of a named revision that has none."),
    ] = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Split the traffic between revisions (blue/green); a revision not named stops."""
    from events import SetTraffic

    split = _shares(shares)
    with api_errors():
        ep = _endpoint(ctx, endpoint)
    c = SetTraffic(endpoint_id=ep["endpoint_id"], shares=split, replicas=replicas)
    answer = ask(ctx, c, timeout)
    said = ", ".join(f"revision {s.revision} {s.traffic}%" for s in split)
    _done(answer, f"endpoint {ep['name']}: {said}", as_json)
