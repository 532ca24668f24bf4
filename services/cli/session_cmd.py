"""``fgpu session ...``: ask for sessions, list, inspect, wait, read logs, run a command in
one, destroy.

Reads go through the read API (never a fold of the log); requests are events on the
user's own subjects, published over NATS. Input is checked before anything is published.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from events import subjects as subj
from services.cli import channel_cmd
from services.cli.options import (
    Settings,
    api_errors,
    connection,
    fail,
    out,
    print_json,
    run_async,
    user_client,
    warn,
)
from services.cli.outcome import RequestIdOpt, chosen_request_id, sent
from services.cli.render import session_lines, sessions_table
from services.cli.secret_cmd import SecretRefsOpt, secret_refs
from services.cli.watch import Session, answers, position, read_sessions, wait_for
from services.domain.channels import MAX_TAIL, OUTPUT_ENDED
from services.domain.status import ENDED as _ENDED
from services.domain.status import SessionStatus

if TYPE_CHECKING:
    from events import SessionRequested, SessionType, VfolderMount
    from services.cli.api_client import ReadApi
    from services.ports import ExecReply

__all__ = ["app"]

app = typer.Typer(help="Sessions: containers holding a slice of a GPU.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the read API's JSON.")]
ENDED = frozenset(s.value for s in _ENDED)
NOT_ENDED = [s.value for s in SessionStatus if s not in _ENDED]
MAX_NAME = 128  # as the quota actor allows
MAX_LISTED = 1000  # sessions one page of the API holds


def _settings(ctx: typer.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def _settled(s: Session) -> bool:
    """RUNNING, ended, or queued with the reason it waits."""
    return s["status"] == "RUNNING" or s["status"] in ENDED or s["waiting"] is not None


def _running_or_ended(s: Session) -> bool:
    return s["status"] == "RUNNING" or s["status"] in ENDED


def _ended(s: Session) -> bool:
    return s["status"] in ENDED


class Shape(NamedTuple):
    """What ``session create`` was asked for, as given."""

    image: str
    amounts: tuple[str, str, str]  # fGPU, cpu, memory
    command: list[str]
    name: str | None
    priority: int
    gpu_models: tuple[str, ...] = ()
    cpu_only: bool = False
    group: str | None = None
    lifetime_s: int | None = None
    session_type: str | None = None


def _checked_request(
    settings: Settings,
    shape: Shape,
    *,
    count: int,
    project: str | None,
    mounts: "list[VfolderMount]",
    request_id: str,
    secret_env: tuple[tuple[str, str], ...] = (),
) -> "list[SessionRequested]":
    """The requests to send, as they will be sent; exits 2 with one line for anything that
    could never be run: what the door says in words, then every rule the quota actor would
    reject them by (``invalid_request``, as the fold calls it, on the first of them: they
    differ in their ids alone)."""
    from datetime import UTC, datetime

    from events import Slots
    from services.client import session_requests
    from services.domain.fold.validation import invalid_request
    from services.domain.image_ref import image_reference_problem
    from services.domain.request_ids import RequestIds
    from services.domain.resources import InvalidAmount, parse_cpu, parse_fgpu, parse_mem

    image, amounts, command, name, priority, gpu_models, cpu_only, group, lifetime_s, kind = shape

    problem = image_reference_problem(image)
    if problem is not None:
        fail(problem)
    if any(not arg for arg in command):
        fail("the command has an empty element: remove it, or quote a real argument")
    if name is not None and not 1 <= len(name) <= MAX_NAME:
        fail(f"--name must be 1-{MAX_NAME} characters, got {len(name)}")
    fgpu, cpu, mem = amounts
    try:
        quanta = 0 if cpu_only else parse_fgpu(fgpu)
        slots = Slots(cpu=parse_cpu(cpu), mem=parse_mem(mem), fgpu=quanta)
    except InvalidAmount as e:
        fail(str(e))
    drafts = session_requests(
        RequestIds(settings.access_key, request_id, settings.secret_key),
        datetime.now(UTC),
        image=image,
        slots=slots,
        command=command,
        count=count,
        priority=priority,
        name=name,
        project=project,
        gpu_models=gpu_models,
        cpu_only=cpu_only,
        group=group,
        lifetime_s=lifetime_s,
        session_type=_session_type(kind),
        mounts=mounts,
        secret_env=secret_env,
    )
    why = invalid_request(drafts[0])
    if why is not None:
        fail(why)
    return drafts


def _asks_for_no_gpu(fgpu: str) -> bool:
    """Whether ``fgpu`` is an amount of zero ("0", "0.00", "0.000"), compared as quanta."""
    from services.domain.resources import InvalidAmount, parse_fgpu

    try:
        return parse_fgpu(fgpu, zero=True) == 0
    except InvalidAmount:
        return False


def _session_type(kind: str | None) -> "SessionType | None":
    from events import SessionType

    if kind is None:
        return None
    try:
        return SessionType(kind)
    except ValueError:
        fail(f"--type is batch or interactive, got {kind!r}")


def _mounts(given: list[str]) -> "list[VfolderMount]":
    """``--mount NAME[:ro|:rw]`` as asked; exits 2 with one line for one that is not."""
    from events import VfolderMount

    mounts = []
    for m in given:
        name, _, mode = m.partition(":")
        if not name or len(name) > 128 or mode not in ("", "ro", "rw"):
            fail(f"--mount {m!r}: give a folder's name, then :ro for read-only if you like")
        mounts.append(VfolderMount(name=name, read_only=mode == "ro"))
    return mounts


def _warn_if_nobody_offers(settings: Settings, image: str) -> None:
    """A warning on stderr when no alive agent has ``image`` (the request waits or is
    rejected); silent when no read API is known or it cannot tell: the request is made."""
    from services.cli.api_client import ApiError, ApiUnreachable

    if settings.api_url is None:
        return
    try:
        agents = settings.read_api().get("/v1/agents")["agents"]
    except (ApiError, ApiUnreachable, ValueError, KeyError, TypeError):
        return
    alive = [a for a in agents if not a["lost"]]
    if not any(image in a["images"] for a in alive):
        warn(
            f"no alive agent offers {image!r} now ({len(alive)} alive): the session is "
            "rejected unless an agent with it registers"
        )


_ImageOpt = Annotated[str, typer.Option(help="Container image, e.g. fgpu/busybox:latest.")]
_FgpuOpt = Annotated[
    str | None,
    typer.Option(help="fGPU to hold, in steps of 0.01 (e.g. 0.5, 2.5); none with --cpu-only."),
]
_CpuOpt = Annotated[str, typer.Option(help="CPU cores (1, 0.5, 250m).")]
_CountOpt = Annotated[int, typer.Option(min=1, max=1000, help="How many sessions.")]
_PriorityOpt = Annotated[int, typer.Option(min=0, max=100, help="Higher goes first.")]
_NameOpt = Annotated[str | None, typer.Option(help="A name to show (1-128 characters).")]
_ProjectOpt = Annotated[
    str | None,
    typer.Option(help="A project of yours, by name (default: your default project)."),
]
_GpuModelOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="Run only on GPUs of this model (as `fgpu agents ls` shows them); again, "
        "or comma-separated, for any of several."
    ),
]
_CpuOnlyOpt = Annotated[
    bool, typer.Option("--cpu-only", help="No GPU at all (then give no --fgpu).")
]
_GroupOpt = Annotated[
    str | None,
    typer.Option(help="The resource group to run in (`fgpu admin group ls`). [default: default]"),
]
_LifetimeOpt = Annotated[
    int | None,
    typer.Option(min=1, help="Seconds it may run at most. [default: its group's]"),
]
_SessionTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--type",
        help="batch (ends with its command) or interactive (kept alive; idle timeout). "
        "[default: batch with a command, else interactive]",
    ),
]
_MountOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="A virtual folder of yours (or shared with you), by name, at "
        "/home/work/NAME; NAME:ro mounts it read-only. Again for more."
    ),
]
_WaitOpt = Annotated[
    bool, typer.Option(help="Wait until each is RUNNING, queued (PENDING) or has ended.")
]
_TimeoutOpt = Annotated[float, typer.Option(help="Seconds --wait waits at most.")]


@app.command("create", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def create(
    ctx: typer.Context,
    image: _ImageOpt,
    fgpu: _FgpuOpt = None,
    cpu: _CpuOpt = "1",
    mem: Annotated[str, typer.Option(help="Memory (512m, 1g).")] = "1g",
    count: _CountOpt = 1,
    priority: _PriorityOpt = 0,
    name: _NameOpt = None,
    project: _ProjectOpt = None,
    gpu_model: _GpuModelOpt = None,
    cpu_only: _CpuOnlyOpt = False,
    group: _GroupOpt = None,
    lifetime: _LifetimeOpt = None,
    session_type: _SessionTypeOpt = None,
    mount: _MountOpt = None,
    secret: SecretRefsOpt = None,
    wait: _WaitOpt = False,
    timeout: _TimeoutOpt = 120.0,
    request_id: RequestIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ask for sessions. The command to run comes after `--`. All of them are asked for,
    or none; sent again with the same --request-id, the same sessions, once."""
    settings = _settings(ctx)
    rid = chosen_request_id(request_id)
    if project is not None and not subj.is_token(project):
        fail(
            f"project {project!r}: give the name of a project of your domain, without its "
            "domain (1-64 letters, digits, '-' or '_')"
        )
    models = tuple(m.strip() for given in gpu_model or () for m in given.split(",") if m.strip())
    _check_gpu_options(fgpu, models, cpu_only)
    shape = Shape(
        image,
        (fgpu or "0", cpu, mem),
        list(ctx.args),
        name,
        priority,
        models,
        cpu_only,
        group,
        lifetime,
        session_type,
    )
    mounts = _mounts(mount or [])
    drafts = _checked_request(
        settings,
        shape,
        count=count,
        project=project,
        mounts=mounts,
        request_id=rid,
        secret_env=secret_refs(secret or []),
    )
    api = _reachable_api(settings) if wait else None

    async def publish() -> list[str]:
        async with user_client(settings) as client:
            return await client.send_requests(drafts)

    ids = sent(settings, publish, f"--request-id {rid}")
    if api is None:
        _say_asked(settings, image, ids, as_json)
    else:
        _say_settled(api, ids, timeout, as_json)


def _check_gpu_options(fgpu: str | None, models: tuple[str, ...], cpu_only: bool) -> None:
    """Exit 2 if the GPU options disagree: a GPU session names its fGPU, one with none
    names no fGPU (but zero) nor model."""
    if cpu_only and fgpu is not None and not _asks_for_no_gpu(fgpu):
        fail("--cpu-only asks for no GPU: give no --fgpu")
    if not cpu_only and fgpu is None:
        fail("give --fgpu (the fGPU to hold), or --cpu-only for a session with no GPU")
    if cpu_only and models:
        fail("--cpu-only asks for no GPU: give no --gpu-model")


def _say_asked(settings: Settings, image: str, ids: list[str], as_json: bool) -> None:
    """The sessions just asked for, not waited for (and a warning if no agent offers
    ``image``)."""
    _warn_if_nobody_offers(settings, image)
    if as_json:
        print_json({"sessions": ids})
    else:
        for i in ids:
            out().print(i, highlight=False)


def _say_settled(api: "ReadApi", ids: list[str], timeout: float, as_json: bool) -> None:
    """Wait until each of ``ids`` is RUNNING, queued or ended, and say them; exit 3 if
    some did not settle in ``timeout`` s, 1 if some were rejected or failed."""
    with _after_publishing(ids):
        found = wait_for(api, ids, _settled, timeout_s=timeout)
    sessions = [found[i] for i in ids if i in found]
    if as_json:
        print_json({"sessions": sessions})
    else:
        out().print(sessions_table(sessions, "requested sessions"))
    unsettled = len(ids) - sum(1 for s in sessions if _settled(s))
    if unsettled:
        fail(f"{unsettled} session(s) did not settle within {timeout:g} s", code=3)
    failed = [s for s in sessions if s["status"] in ("REJECTED", "ERROR")]
    for s in failed:
        warn(f"{s['id']}: {s['status']} ({s['reason']})")
    if failed:
        raise SystemExit(1)


@app.command("wait")
def wait_cmd(
    ctx: typer.Context,
    session_ids: Annotated[list[str], typer.Argument(help="Sessions to wait for.")],
    status: Annotated[
        str, typer.Option("--for", help="running (RUNNING or ended) or ended.")
    ] = "running",
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most.")] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Wait until sessions run (or end); exit 3 if they do not within the timeout."""
    if status not in ("running", "ended"):
        fail("--for must be running or ended")
    reached = _ended if status == "ended" else _running_or_ended
    with api_errors():
        found = wait_for(_settings(ctx).read_api(), session_ids, reached, timeout_s=timeout)
    sessions = [found[i] for i in session_ids if i in found]
    if as_json:
        print_json({"sessions": sessions})
    else:
        out().print(sessions_table(sessions))
    for unknown in (i for i in session_ids if i not in found):
        warn(f"no session {unknown!r}")
    if len(sessions) < len(session_ids) or not all(reached(s) for s in sessions):
        fail(f"not every session got there within {timeout:g} s", code=3)


@app.command("ls")
def ls(
    ctx: typer.Context,
    show_all: Annotated[bool, typer.Option("--all", help="Include ended sessions.")] = False,
    owner: Annotated[str | None, typer.Option(help="Only this access key's.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=MAX_LISTED, help="Newest sessions shown at most.")
    ] = MAX_LISTED,
    as_json: JsonOpt = False,
) -> None:
    """List sessions, newest first (by default those not ended)."""
    params: dict[str, Any] = {"owner": owner, "limit": limit}
    if not show_all:
        params["status"] = list(NOT_ENDED)
    with api_errors():
        page = _settings(ctx).read_api().get("/v1/sessions", params)
    if as_json:
        print_json(page)
        return
    out().print(sessions_table(page["sessions"]))
    if page["total"] > len(page["sessions"]):
        warn(f"{page['total'] - len(page['sessions'])} older sessions not shown (--limit)")


@app.command("info")
def info(ctx: typer.Context, session_id: str, as_json: JsonOpt = False) -> None:
    """One session: status, placement, and when it reached each status."""
    with api_errors():
        s = _settings(ctx).read_api().get(f"/v1/sessions/{_id(session_id)}")
    if as_json:
        print_json(s)
        return
    for line in session_lines(s):
        out().print(line, highlight=False)


@app.command("logs")
def logs(
    ctx: typer.Context,
    session_id: str,
    tail: Annotated[int, typer.Option(min=0, help="The last this many lines.")] = 200,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Then print the output as it comes, until the session ends."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """The output of a session's container, asked of its agent; once the session has
    ended, what its agent kept of it (the last 10,000 lines) when it removed the container.
    With --follow, its last lines and then what it writes as it writes it, until its
    container ends or Ctrl-C (over NATS, as the keypair the CLI speaks as: the agent
    checks it as for the logs, and writes the follow's opening and closing on the log)."""
    settings = _settings(ctx)
    if follow and as_json:
        fail("--follow prints the output as it comes: --json is for the output at once")
    with api_errors():
        s = settings.read_api().get(f"/v1/sessions/{_id(session_id)}")
    if s["agent"] is None:
        fail(f"session {session_id} never ran (status {s['status']})", code=1)
    agent_id: str = s["agent"]
    if follow and s["status"] not in ENDED:
        _follow(settings, agent_id, session_id, min(tail, MAX_TAIL))
        return

    async def ask() -> dict[str, Any]:
        import msgspec

        from services.ports import AgentUnreachable, LogsRequest

        async with connection(settings) as conn:
            try:
                reply = await conn.bus.ask(agent_id, LogsRequest(session_id=session_id, tail=tail))
            except AgentUnreachable as e:
                fail(str(e), code=1)
        answer: dict[str, Any] = msgspec.to_builtins(reply)
        return answer

    answer = run_async(ask)
    if as_json:
        print_json(answer)
    elif not answer.get("ok"):
        why = str(answer.get("error") or "the session's container is gone")
        if s["status"] in ENDED:
            ended = f"session {session_id} ended ({s['status']})"
            why = f"{ended} and {agent_id} kept none of its output ({why})"
        fail(why, code=1)
    else:
        import sys

        sys.stdout.write(str(answer["logs"]))


def _follow(settings: Settings, agent_id: str, session_id: str, tail: int) -> None:
    """Print ``session_id``'s output as it comes until its container ends (exit 0), the
    agent refuses or stops the follow (exit 1, saying why), or Ctrl-C (130)."""

    async def run() -> str:
        from services.actors.user_channels import ChannelRefused, follow
        from services.ports import AgentUnreachable

        class _Stdout:
            async def write(self, data: bytes) -> None:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()

        async with connection(settings) as conn:
            try:
                closing = await follow(
                    conn.bus, conn.bus.requester, agent_id, session_id, _Stdout(), tail=tail
                )
            except (ChannelRefused, AgentUnreachable) as e:
                fail(str(e), code=1)
        return closing.reason

    import sys

    why = run_async(run)
    if why != OUTPUT_ENDED:
        fail(f"the follow stopped: {why}", code=1)


EXEC_NOT_RUN = 125  # exit status when the command did not run or end (as docker exec's)


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_cmd(
    ctx: typer.Context,
    session_id: str,
    timeout: Annotated[
        float,
        typer.Option(help="Seconds to wait for the command (at most 3600); it may run on after."),
    ] = 60.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the agent's answer as JSON, output as text.")
    ] = False,
) -> None:
    """Run a command in a running session's container (no shell, no terminal); the command
    comes after `--`. Its output comes back on stdout and stderr, and the exit status is
    its own (125: it did not run or did not end in time). Asked of the session's agent over
    NATS, as its owner or an administrator of its domain; the log records who ran what."""
    from services.domain.access.session_access import exec_problem

    settings = _settings(ctx)
    argv = tuple(ctx.args)
    problem = exec_problem(argv, timeout)
    if problem is not None:
        fail(problem)
    with api_errors():
        s = settings.read_api().get(f"/v1/sessions/{_id(session_id)}")
    if s["status"] != "RUNNING" or s["agent"] is None:
        fail(f"session {session_id} is not running (status {s['status']})", code=EXEC_NOT_RUN)
    agent_id: str = s["agent"]

    async def ask() -> "ExecReply":
        from services.ports import AgentUnreachable, ExecReply, ExecRequest

        request = ExecRequest(session_id=session_id, argv=argv, timeout_s=timeout)
        async with connection(settings) as conn:
            try:
                reply = await conn.bus.ask(agent_id, request, timeout_s=timeout + 10)
            except AgentUnreachable as e:
                fail(str(e), code=EXEC_NOT_RUN)
        if not isinstance(reply, ExecReply):  # an agent that does not know the request
            fail(f"agent {agent_id}: {getattr(reply, 'error', reply)}", code=EXEC_NOT_RUN)
        return reply

    reply = run_async(ask)
    if as_json:
        print_json(_exec_json(reply))
    elif reply.ok:
        _write_exec_output(reply)
    if not reply.ok or reply.exit_code is None:
        if not as_json:
            fail(str(reply.error), code=EXEC_NOT_RUN)
        raise SystemExit(EXEC_NOT_RUN)
    raise SystemExit(reply.exit_code)


def _exec_json(reply: "ExecReply") -> dict[str, Any]:
    """The agent's answer with the output as text (undecodable bytes replaced)."""
    import msgspec

    shown: dict[str, Any] = msgspec.to_builtins(reply)
    shown["stdout"] = reply.stdout.decode(errors="replace")
    shown["stderr"] = reply.stderr.decode(errors="replace")
    return shown


def _write_exec_output(reply: "ExecReply") -> None:
    """The command's bytes as it wrote them, each stream to ours; then a line on stderr for
    each stream that was cut."""
    import sys

    sys.stdout.buffer.write(reply.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(reply.stderr)
    sys.stderr.flush()
    for name, kept, seen in (
        ("stdout", reply.stdout, reply.stdout_bytes),
        ("stderr", reply.stderr, reply.stderr_bytes),
    ):
        if seen > len(kept):
            warn(f"{name} cut: the first {len(kept)} of {seen} bytes shown")


@app.command("rm")
def rm(
    ctx: typer.Context,
    session_ids: Annotated[list[str], typer.Argument(help="Sessions to destroy.")],
    wait: Annotated[bool, typer.Option(help="Wait until each has ended.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 60.0,
    request_id: RequestIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Destroy sessions: a pending one is cancelled, a running one stopped and removed.
    Sent again with the same --request-id, each destroy is the same request."""
    settings = _settings(ctx)
    rid = chosen_request_id(request_id)
    session_ids = list(dict.fromkeys(_id(sid) for sid in session_ids))  # each once
    api = _reachable_api(settings)
    with api_errors():
        after = position(api)

    async def publish() -> dict[str, str]:
        async with user_client(settings) as client:
            return {sid: await client.destroy(sid, request_id=rid) for sid in session_ids}

    requests = sent(settings, publish, f"--request-id {rid}")
    with _after_publishing([f"destroy {sid}" for sid in requests]):
        results = _destroy_results(api, requests, after, wait=wait, timeout_s=timeout)
    failed = {sid: r for sid, r in results.items() if r["result"] in ("refused", "unanswered")}
    if as_json:
        print_json(results)
    else:
        for sid, r in results.items():
            line = f"{sid}: {r['result']}" + (f" ({r['reason']})" if r["reason"] else "")
            if sid in failed:
                warn(line)
            else:
                out().print(line, highlight=False)
    if failed:
        raise SystemExit(1)


def _destroy_results(
    api: "ReadApi", requests: dict[str, str], after: int, *, wait: bool, timeout_s: float
) -> dict[str, dict[str, str]]:
    """What became of each destroy request (``requests``: session -> request id):
    refused (why), or the session's status.

    The API says how each request was answered (``/v1/destroys/{id}``); the answers come
    after the requests on the log, which come after sequence ``after``, so the event
    stream, read from there, says when to ask again.
    """
    import time

    deadline = time.monotonic() + timeout_s
    paths = {rid: f"/v1/destroys/{rid}" for rid in requests.values()}
    found = answers(api, paths.values(), after, timeout_s=timeout_s)
    answered = {rid: found[path] for rid, path in paths.items() if path in found}
    carried_out = [
        sid for sid, rid in requests.items() if rid in answered and answered[rid]["refused"] is None
    ]
    remaining = max(0.0, deadline - time.monotonic())
    if wait and carried_out:
        sessions = wait_for(api, carried_out, _ended, timeout_s=remaining)
    else:
        sessions, _ = read_sessions(api, carried_out)
    results: dict[str, dict[str, str]] = {}
    for sid, rid in requests.items():
        answer = answered.get(rid)
        if answer is not None and answer["refused"] is not None:
            results[sid] = {"result": "refused", "reason": answer["refused"]}
        elif answer is not None and sid in sessions:
            s = sessions[sid]
            results[sid] = {"result": s["status"], "reason": s["reason"] or ""}
        else:
            results[sid] = {"result": "unanswered", "reason": f"no answer in {timeout_s:g} s"}
    return results


def _reachable_api(settings: Settings) -> "ReadApi":
    """The read API, once it has answered: a command that waits through it asks before it
    publishes anything, so a missing API never leaves a request made and unreported."""
    api = settings.read_api()
    with api_errors():
        api.get("/v1/sessions", {"limit": 1})
    return api


@contextmanager
def _after_publishing(published: list[str]) -> Iterator[None]:
    """The read API's failures, once the requests are on the log: they are printed (on
    stdout, as a success would) before the error, so the user knows what was asked."""
    from services.cli.api_client import ApiError, ApiUnreachable

    try:
        yield
    except (ApiError, ApiUnreachable):
        for line in published:
            out().print(line, highlight=False)
        warn("the requests above were published; the read API failed before they settled")
        with api_errors():
            raise


def _id(session_id: str) -> str:
    """``session_id`` if it can be one; exits 2 otherwise (it goes into a URL path)."""
    from events import subjects as subj

    if not subj.is_token(session_id):
        fail(f"{session_id!r} is not a session id")
    return session_id


# The channels into a session, in a module of their own.
app.add_typer(channel_cmd.app)  # shell, app
