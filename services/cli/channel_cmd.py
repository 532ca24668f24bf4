"""``fgpu session shell`` and ``fgpu session app``: a terminal in a running session, and a
local port forwarded to a port in its container. Both go over NATS alone, to the
session's agent, as the keypair the CLI speaks as (the owner of the session, or an
administrator of its domain: the agent checks, and writes each opening and closing on
the log). ``session_cmd`` puts its ``app`` in ``fgpu session``.
"""

import sys
from collections.abc import AsyncIterator
from typing import Annotated

import typer

from events import subjects as subj
from services.cli.options import Settings, api_errors, connection, fail, run_async, warn

__all__ = ["app"]

NOT_OPENED = 125  # as exec's: the shell did not run (or its exit is unknown)

app = typer.Typer()  # no group of its own: session_cmd puts these in ``fgpu session``


def _running_agent(settings: Settings, session_id: str) -> str:
    """The agent that runs ``session_id``; exits if it does not run."""
    if not subj.is_token(session_id):
        fail(f"session id {session_id!r} must be letters, digits, - or _")
    with api_errors():
        s = settings.read_api().get(f"/v1/sessions/{session_id}")
    if s["status"] != "RUNNING" or s["agent"] is None:
        fail(f"session {session_id} is not running (status {s['status']})", code=NOT_OPENED)
    agent: str = s["agent"]
    return agent


@app.command("shell")
def shell_cmd(ctx: typer.Context, session_id: str) -> None:
    """A terminal in a running session's container (bash if the image has it, else sh),
    resized with yours. Exits with the shell's status. Over NATS, as its owner or an
    administrator of its domain; the log records who opened it and when it closed."""
    import os

    settings: Settings = ctx.obj
    agent_id = _running_agent(settings, session_id)

    async def run() -> int | None:
        import signal

        import anyio

        from services.cli.channels import ChannelRefused, Terminal, shell
        from services.ports import AgentUnreachable

        terminal = Terminal(sys.stdin.fileno(), sys.stdout.fileno())

        async def sizes() -> AsyncIterator[tuple[int, int]]:
            with anyio.open_signal_receiver(signal.SIGWINCH) as changes:
                async for _ in changes:
                    yield terminal.size()

        async with connection(settings) as conn:
            try:
                with terminal.raw():
                    closing = await shell(
                        conn.bus,
                        conn.bus.requester,
                        agent_id,
                        session_id,
                        terminal,
                        sizes(),
                        term=os.environ.get("TERM", "xterm"),
                    )
            except (ChannelRefused, AgentUnreachable) as e:
                fail(str(e), code=NOT_OPENED)
        if closing.exit_code is None:
            warn(f"the terminal closed: {closing.reason}")
        return closing.exit_code

    code = run_async(run)
    raise SystemExit(NOT_OPENED if code is None else code)


@app.command("app")
def app_cmd(
    ctx: typer.Context,
    session_id: str,
    target: Annotated[
        str, typer.Argument(help="A service the image declares (fgpu.service.<name>), or a port.")
    ],
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="The local port (0: any free one).")
    ] = 0,
) -> None:
    """Forward a local port (127.0.0.1) to a port in a running session's container: a
    service its image declares by name (label fgpu.service.<name>=<protocol>:<port>), or a
    port number. Runs until interrupted; each connection is relayed over NATS, as the
    session's owner or an administrator of its domain, and its opening and closing are on
    the log."""
    settings: Settings = ctx.obj
    agent_id = _running_agent(settings, session_id)

    async def run() -> None:
        import anyio

        from services.cli.channels import serve_app

        async with connection(settings) as conn, anyio.create_task_group() as tg:
            bound = await tg.start(
                lambda task_status: serve_app(
                    conn.bus,
                    conn.bus.requester,
                    agent_id,
                    session_id,
                    target,
                    port,
                    on_error=lambda why: warn(f"a connection was refused: {why}"),
                    task_status=task_status,
                )
            )
            print(f"127.0.0.1:{bound} -> {target} in session {session_id}", flush=True)

    run_async(run)
