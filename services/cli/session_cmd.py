"""``fgpu session ...``: ask for sessions, list, inspect, read logs, destroy."""

from typing import Annotated

import anyio
import msgspec
import typer

from events import Slots
from events import subjects as subj
from services.actors.common import SystemClock
from services.cli.options import Settings, console, fail, print_json, run_async
from services.cli.render import session_dict, sessions_table
from services.cli.stack import connected
from services.client import Client
from services.domain.resources import InvalidAmount, parse_cpu, parse_fgpu, parse_mem
from services.domain.state import ClusterState
from services.domain.status import ENDED, SessionStatus
from services.ports import AgentUnreachable, LogsRequest

__all__ = ["app"]

app = typer.Typer(help="Sessions: containers holding a slice of a GPU.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _settings(ctx: typer.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def _settled(v_status: SessionStatus, waiting: str | None) -> bool:
    return v_status is SessionStatus.RUNNING or v_status in ENDED or waiting is not None


@app.command("create", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def create(
    ctx: typer.Context,
    image: Annotated[str, typer.Option(help="Container image, e.g. fgpu/busybox:latest.")],
    fgpu: Annotated[str, typer.Option(help="fGPU to hold, in steps of 0.01 (e.g. 0.5, 2.5).")],
    cpu: Annotated[str, typer.Option(help="CPU cores (1, 0.5, 250m).")] = "1",
    mem: Annotated[str, typer.Option(help="Memory (512m, 1g).")] = "1g",
    count: Annotated[int, typer.Option(min=1, max=1000, help="How many sessions.")] = 1,
    priority: Annotated[int, typer.Option(min=0, max=100, help="Higher goes first.")] = 0,
    name: Annotated[str | None, typer.Option(help="A name to show.")] = None,
    wait: Annotated[
        bool, typer.Option(help="Wait until each is RUNNING, queued (PENDING) or has ended.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Ask for sessions. The command to run comes after `--`."""
    settings = _settings(ctx)
    try:
        slots = Slots(cpu=parse_cpu(cpu), mem=parse_mem(mem), fgpu=parse_fgpu(fgpu))
    except InvalidAmount as e:
        fail(str(e))
    command = list(ctx.args)

    async def go() -> tuple[list[str], ClusterState | None]:
        async with connected(settings.url, "fgpu-cli") as conn:
            events = conn.log
            client = Client(events, SystemClock(), settings.access_key)
            ids = await client.create(
                image=image, slots=slots, command=command, count=count, priority=priority, name=name
            )
            if not wait:
                return ids, None

            def done(s: ClusterState) -> bool:
                return all(
                    i in s.sessions and _settled(s.sessions[i].status, s.sessions[i].waiting)
                    for i in ids
                )

            # The whole log, not only what follows the requests: the fold places a session
            # only on an agent it knows, and agents registered before. Folding from the
            # start, the requests and all that follows them are in the fold however soon
            # the sessions settle.
            state = ClusterState()
            with anyio.move_on_after(timeout):
                state = await client.wait_until(done, state)
            return ids, state

    ids, state = run_async(go)
    if state is None:
        if as_json:
            print_json({"sessions": ids})
        else:
            for i in ids:
                console.print(i)
        return
    views = [state.sessions[i] for i in ids if i in state.sessions]
    if as_json:
        print_json({"sessions": [session_dict(v) for v in views]})
    else:
        console.print(sessions_table(views, "requested sessions"))
    bad = [v for v in views if v.status in (SessionStatus.REJECTED, SessionStatus.ERROR)]
    unsettled = [v for v in views if not _settled(v.status, v.waiting)]
    if bad:
        raise SystemExit(1)
    if unsettled or len(views) < len(ids):
        fail(f"{len(unsettled)} session(s) did not settle within {timeout:g} s", code=3)


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
    settings = _settings(ctx)
    if status not in ("running", "ended"):
        fail("--for must be running or ended")

    def reached(v_status: SessionStatus) -> bool:
        if status == "ended":
            return v_status in ENDED
        return v_status is SessionStatus.RUNNING or v_status in ENDED

    async def go() -> ClusterState:
        async with connected(settings.url, "fgpu-cli") as conn:
            events = conn.log
            client = Client(events, SystemClock(), settings.access_key)
            state = ClusterState()
            with anyio.move_on_after(timeout):
                state = await client.wait_until(
                    lambda s: all(
                        i in s.sessions and reached(s.sessions[i].status) for i in session_ids
                    ),
                    state,
                )
            return state

    state = run_async(go)
    views = [state.sessions[i] for i in session_ids if i in state.sessions]
    if as_json:
        print_json({"sessions": [session_dict(v) for v in views]})
    else:
        console.print(sessions_table(views))
    if len(views) < len(session_ids) or not all(reached(v.status) for v in views):
        fail(f"not every session got there within {timeout:g} s", code=3)


@app.command("ls")
def ls(
    ctx: typer.Context,
    show_all: Annotated[bool, typer.Option("--all", help="Include ended sessions.")] = False,
    owner: Annotated[str | None, typer.Option(help="Only this access key's.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List sessions (by default those not ended)."""
    settings = _settings(ctx)
    state = run_async(lambda: _state(settings))
    views = [
        v
        for v in state.sessions.values()
        if (show_all or v.status not in ENDED) and (owner is None or v.owner == owner)
    ]
    if as_json:
        print_json({"sessions": [session_dict(v) for v in views]})
    else:
        console.print(sessions_table(views))


@app.command("info")
def info(ctx: typer.Context, session_id: str, as_json: JsonOpt = False) -> None:
    """One session, with the history of its statuses."""
    state = run_async(lambda: _state(_settings(ctx)))
    v = state.sessions.get(session_id)
    if v is None:
        fail(f"no session {session_id!r}", code=1)
    d = session_dict(v, history=True)
    if as_json:
        print_json(d)
        return
    for key, value in d.items():
        if key != "history":
            console.print(f"[bold]{key}[/]: {value}")
    console.print("[bold]history[/]:")
    for h in d["history"]:
        console.print(f"  {h['at']}  {h['status']}  (seq {h['seq']})")


@app.command("logs")
def logs(ctx: typer.Context, session_id: str, as_json: JsonOpt = False) -> None:
    """The output of a session's container, asked of its agent."""
    settings = _settings(ctx)

    async def go() -> dict[str, object]:
        async with connected(settings.url, "fgpu-cli") as conn:
            events = conn.log
            state = await Client(events, SystemClock(), settings.access_key).state()
            v = state.sessions.get(session_id)
            if v is None:
                fail(f"no session {session_id!r}", code=1)
            if v.agent_id is None:
                fail(f"session {session_id} never ran (status {v.status})", code=1)
            if v.status in ENDED:
                fail(f"session {session_id} ended ({v.status}); its container was removed", code=1)
            try:
                reply = await conn.bus.ask(v.agent_id, LogsRequest(session_id=session_id))
            except AgentUnreachable as e:
                fail(str(e), code=1)
            answer: dict[str, object] = msgspec.to_builtins(reply)
            return answer

    answer = run_async(go)
    if as_json:
        print_json(answer)
    elif not answer.get("ok"):
        fail(str(answer.get("error") or "the session's container is gone"), code=1)
    else:
        console.out(str(answer["logs"]), end="")


@app.command("rm")
def rm(
    ctx: typer.Context,
    session_ids: Annotated[list[str], typer.Argument(help="Sessions to destroy.")],
    wait: Annotated[bool, typer.Option(help="Wait until each has ended.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Destroy sessions: a pending one is cancelled, a running one stopped and removed."""
    settings = _settings(ctx)
    for sid in session_ids:
        if not subj.is_token(sid):
            fail(f"{sid!r} is not a session id")

    async def go() -> dict[str, dict[str, str]]:
        async with connected(settings.url, "fgpu-cli") as conn:
            events = conn.log
            client = Client(events, SystemClock(), settings.access_key)
            requests = {sid: await client.destroy(sid) for sid in session_ids}
            out: dict[str, dict[str, str]] = {}

            def answered(s: ClusterState) -> bool:
                for sid, rid in requests.items():
                    if rid not in s.destroy_answers:
                        return False
                    v = s.sessions.get(sid)
                    carried_out = s.destroy_answers[rid] is None
                    if wait and carried_out and v is not None and v.status not in ENDED:
                        return False
                return True

            state = ClusterState()
            with anyio.move_on_after(timeout):
                state = await client.wait_until(answered, state)
            for sid, rid in requests.items():
                refused = state.destroy_answers.get(rid)
                v = state.sessions.get(sid)
                if rid not in state.destroy_answers:
                    out[sid] = {"result": "unanswered", "reason": f"no answer in {timeout:g} s"}
                elif refused is not None:
                    out[sid] = {"result": "refused", "reason": refused}
                elif v is not None:
                    out[sid] = {"result": v.status.value, "reason": v.reason or ""}
                else:
                    out[sid] = {"result": "unanswered", "reason": f"no answer in {timeout:g} s"}
            return out

    results = run_async(go)
    if as_json:
        print_json(results)
    else:
        for sid, r in results.items():
            console.print(f"{sid}: {r['result']}" + (f" ({r['reason']})" if r["reason"] else ""))
    if any(r["result"] in ("refused", "unanswered") for r in results.values()):
        raise SystemExit(1)


async def _state(settings: Settings) -> ClusterState:
    async with connected(settings.url, "fgpu-cli") as conn:
        events = conn.log
        return await Client(events, SystemClock(), settings.access_key).state()
