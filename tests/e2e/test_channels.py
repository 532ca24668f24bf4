"""``fgpu session shell`` and ``fgpu session app`` below the command line: a terminal and a
forwarded port into a session's container on a real Docker engine, relayed by its agent
(as ``fgpu agent`` runs it) over a real nats-server. What the user's end sees, who may
open one, and the opening and closing on the log.

(The server's own refusal, hearing or writing another key's channel, is the
``channel-into-anothers-session`` row of ``test_adversarial.py``.)
"""

import fcntl
import functools
import os
import pty
import struct
import subprocess
import termios
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest

from events import RevokeKeypair, SessionChannelClosed, SessionChannelOpened
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.actors.relay import Closing
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.nats_bus import NatsBus
from services.adapters.nats_connection import NatsConnection
from services.adapters.system_clock import SystemClock
from services.cli.channels import ChannelRefused, Terminal, serve_app, shell
from tests.support.cli_stack import docker, remove_agent_containers
from tests.support.docker_env import require_docker
from tests.support.lab import DEADLINE_S, lab_session

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

WEB_IMAGE = "fgpu/busybox-web:test"  # busybox, declaring fgpu.service.web=http:8080
SERVE = "mkdir -p /www && echo hello-from-the-session > /www/index.html && httpd -f -p 8080 -h /www"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def web_image() -> str:
    """Built from fgpu/busybox with the service label, if it is not there yet."""
    require_docker()
    dockerfile = "FROM fgpu/busybox:latest\nLABEL fgpu.service.web=http:8080\n"
    build = ["docker", "build", "-q", "-t", WEB_IMAGE, "-"]
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the legacy builder needs no network
    subprocess.run(build, input=dockerfile, text=True, env=env, check=True, timeout=120)
    assert "http:8080" in docker("image", "inspect", WEB_IMAGE, "--format", "{{.Config.Labels}}")
    return WEB_IMAGE


@dataclass
class World:
    conn: NatsConnection
    agent: str
    session: str

    def bus(self, key: str) -> NatsBus:
        return NatsBus(self.conn.client, key)  # asking in ``key``'s name, as its user would

    async def audit(self, n: int) -> list[SessionChannelOpened | SessionChannelClosed]:
        """The first ``n`` channel events on the session's exec subject, once there."""
        found: list[SessionChannelOpened | SessionChannelClosed] = []
        subject = subj.agent_exec(self.agent, self.session)
        with anyio.fail_after(DEADLINE_S):
            async for batch in self.conn.log.tail(0, subject=subject):
                found += [r.event for r in batch]  # type: ignore[misc]
                if len(found) >= n:
                    return found
        raise AssertionError("the log ended")


@pytest.fixture
async def world(web_image: str) -> AsyncIterator[World]:
    """Ana's session RUNNING busybox's httpd on port 8080, on a Docker agent of its own."""
    agent = f"chan-{uuid.uuid4().hex[:8]}"
    try:
        async with (
            DockerRuntime() as runtime,
            lab_session(runtime, agent, web_image, ("sh", "-c", SERVE)) as (conn, sid),
        ):
            yield World(conn, agent, sid)
    finally:
        remove_agent_containers(agent)


# ---- a terminal -----------------------------------------------------------------------------


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int]]:
    """A pseudo-terminal (master, slave) of 30 x 100: the slave plays the user's terminal."""
    master, slave = pty.openpty()
    _set_size(slave, 30, 100)
    yield master, slave
    os.close(master)
    os.close(slave)


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Screen:
    """What the shell shows on the master side, and a way to type into it."""

    def __init__(self, master: int) -> None:
        self.master, self.seen = master, b""

    async def type(self, text: str) -> None:
        await anyio.wait_writable(self.master)
        os.write(self.master, text.encode())

    async def ask(self, keys: str, *texts: str) -> None:
        """Type ``keys`` until all of ``texts`` have been shown since."""
        with anyio.fail_after(DEADLINE_S):
            while True:
                start = len(self.seen)
                await self.type(keys)
                with anyio.move_on_after(1):
                    while not all(t.encode() in self.seen[start:] for t in texts):
                        await anyio.wait_readable(self.master)
                        self.seen += os.read(self.master, 4096)
                    return


@asynccontextmanager
async def _anas_shell(
    world: World, tty: int, sizes: AsyncIterator[tuple[int, int]]
) -> AsyncIterator[list[Closing]]:
    """Ana's shell in the session on the terminal ``tty`` (raw), for the block and until it
    closes: then how it closed is in the list yielded."""
    terminal = Terminal(tty, tty)
    closed: list[Closing] = []

    async def run() -> None:
        with terminal.raw():
            bus = world.bus("AKana")
            closed.append(await shell(bus, "AKana", world.agent, world.session, terminal, sizes))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        yield closed


async def test_a_terminal_runs_what_is_typed_follows_a_resize_and_is_audited(
    world: World, pty_pair: tuple[int, int]
) -> None:
    master, slave = pty_pair
    screen = Screen(master)
    send_size, sizes = anyio.create_memory_object_stream[tuple[int, int]](1)
    async with send_size, sizes, _anas_shell(world, slave, sizes) as closed:
        # Typed again until it shows: keys typed while the shell starts may be eaten (ash
        # asks the terminal where its cursor is, and reads what comes as the answer).
        # $((6*7)) is the container's shell's arithmetic.
        await screen.ask("echo sum-$((6*7)); stty size\r", "sum-42", "30 100")
        await send_size.send((40, 120))
        await screen.ask("stty size\r", "40 120")  # the resize and the keys travel apart
        await screen.type("exit 7\r")
    [closing] = closed
    assert closing.exit_code == 7
    opened, closed = await world.audit(2)
    assert isinstance(opened, SessionChannelOpened) and isinstance(closed, SessionChannelClosed)
    assert (opened.requester, opened.kind, opened.agent_id) == ("AKana", "shell", world.agent)
    assert closed.causation_id == opened.id and closed.channel == opened.channel
    assert (closed.exit_code, closed.requester) == (7, "AKana")
    assert closed.bytes_in > 0 and closed.bytes_out > 0


async def test_a_terminal_open_is_cut_once_its_key_is_revoked_and_says_why(
    world: World, pty_pair: tuple[int, int]
) -> None:
    master, slave = pty_pair
    screen = Screen(master)
    why = "access key AKana was revoked"
    no_size, sizes = anyio.create_memory_object_stream[tuple[int, int]]()
    with anyio.fail_after(DEADLINE_S):
        async with no_size, sizes, _anas_shell(world, slave, sizes) as closed:
            await screen.ask("echo up-$((6*7))\r", "up-42")
            revoke = system_applied(RevokeKeypair(access_key="AKana"), SystemClock())
            await world.conn.log.append(subj.TENANCY, revoke)
    [closing] = closed
    assert closing.reason == why  # what the user's side is told
    opened, closed = await world.audit(2)
    assert isinstance(closed, SessionChannelClosed) and closed.causation_id == opened.id
    assert closed.reason == why
    assert await _refused(world, "AKana", "web") == [why]


# ---- an app port ----------------------------------------------------------------------------


async def _get(port: int) -> bytes:
    """``GET /`` on 127.0.0.1:``port``, HTTP/1.0: all the answer, to the server's close."""
    with anyio.fail_after(DEADLINE_S):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
            answer = b""
            with pytest.raises(anyio.EndOfStream):
                while True:
                    answer += await stream.receive()
    return answer


async def test_a_service_by_name_answers_through_the_tunnel_and_each_connection_is_audited(
    world: World,
) -> None:
    bus = world.bus("AKana")
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_app, bus, "AKana", world.agent, world.session, "web", 0)
        first, second = await _get(port), await _get(port)
        tg.cancel_scope.cancel()
    for answer in (first, second):
        assert answer.startswith(b"HTTP/1.") and b" 200 " in answer.split(b"\r\n")[0]
        assert answer.endswith(b"hello-from-the-session\n")
    events = await world.audit(4)
    opened = [e for e in events if isinstance(e, SessionChannelOpened)]
    closed = [e for e in events if isinstance(e, SessionChannelClosed)]
    assert [(e.kind, e.target, e.service) for e in opened] == [("app", "8080", "web")] * 2
    assert sorted(e.causation_id or "" for e in closed) == sorted(e.id for e in opened)
    assert all(e.bytes_out == len(first) and e.exit_code == 0 for e in closed)


async def test_a_port_by_number_answers_and_an_unknown_service_is_refused(world: World) -> None:
    bus = world.bus("AKana")
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_app, bus, "AKana", world.agent, world.session, "8080", 0)
        assert (await _get(port)).endswith(b"hello-from-the-session\n")
        tg.cancel_scope.cancel()
    assert await _refused(world, "AKana", "jupyter") == [
        "no service 'jupyter' in the session's image (it declares: web)"
    ]


async def _refused(world: World, key: str, target: str) -> list[str]:
    """What a connection to ``target``, asked as ``key``, was refused with: it is closed
    before a byte."""
    told: list[str] = []
    serve = functools.partial(
        serve_app, world.bus(key), key, world.agent, world.session, target, 0, on_error=told.append
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve)
        assert await _get(port) == b""
        tg.cancel_scope.cancel()
    return told


async def test_only_the_owner_and_an_admin_of_its_domain_may_open_one(
    world: World, pty_pair: tuple[int, int]
) -> None:
    for key in ("AKeve", "AKoadm", "AKnobody"):
        refused = f"{key} may not run commands in session {world.session}"
        assert await _refused(world, key, "web") == [refused]
        _, slave = pty_pair
        no_size, nothing = anyio.create_memory_object_stream[tuple[int, int]]()
        with no_size, nothing, pytest.raises(ChannelRefused, match=refused):
            await shell(
                world.bus(key), key, world.agent, world.session, Terminal(slave, slave), nothing
            )
    # Refusals are answered, not written; the admin's connection is.
    assert await world.conn.log.count(subj.agent_exec(world.agent, world.session)) == 0
    bus = world.bus("AKadm")
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_app, bus, "AKadm", world.agent, world.session, "web", 0)
        assert (await _get(port)).endswith(b"hello-from-the-session\n")
        tg.cancel_scope.cancel()
    opened, closed = await world.audit(2)
    assert isinstance(opened, SessionChannelOpened) and opened.requester == "AKadm"
    assert isinstance(closed, SessionChannelClosed) and closed.requester == "AKadm"
