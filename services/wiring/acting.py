"""The web UI's acts on the bus: a signed-in user's own connection, as the CLI's.

``acting_on(url)`` is the read API's ``ActAs``: it connects to ``url`` as the user (the
access key as user, its secret as password, replies in the user's own inbox), so the
servers and the gatekeeper give this connection the user's permissions and no more. Its
requests go to the intake on the user's own subject, as ``fgpu session create``, ``fgpu
session rm``, ``fgpu admin ...`` and ``fgpu vfolder create|share`` send them
(``services.client.Client``); it asks a session's agent for its logs as ``fgpu session
logs`` does, follows them as its ``--follow`` does, opens a terminal as ``fgpu session
shell`` does and a connection to an app as ``fgpu session app`` does
(``services.actors.user_channels``): the agent sees the user's key, judges it, and writes
each channel's opening and closing on the log.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack

from events import AdminCommand, ServeCommand
from services.actors.user_channels import ChannelRefused
from services.actors.user_channels import app as open_app
from services.actors.user_channels import follow as follow_output
from services.actors.user_channels import shell as open_shell
from services.adapters.nats_bus import NatsBus
from services.adapters.nats_connection import nats_connection
from services.adapters.system_clock import SystemClock
from services.api.browser import (
    ActAs,
    Acting,
    AppEnd,
    BadLaunch,
    BadRequestId,
    Launch,
    ShellEnd,
    ShellRefused,
)
from services.client import Client, session_requests
from services.domain.fold.validation import invalid_request
from services.domain.image_ref import image_reference_problem
from services.domain.request_ids import RequestIds, new_request_id, request_id_problem
from services.ports import (
    AgentUnreachable,
    LogsReply,
    LogsRequest,
    ServicesReply,
    ServicesRequest,
)
from services.wiring.identity import Identity

__all__ = ["acting_on"]


class _UserConnection:
    def __init__(self, stack: AsyncExitStack, client: Client, bus: NatsBus) -> None:
        self._stack = stack
        self._client = client
        self._bus = bus

    async def create(self, launch: Launch) -> list[str]:
        c = self._client
        rid = launch.request_id or new_request_id()
        problem = request_id_problem(rid) or image_reference_problem(launch.image)
        if problem is not None:
            raise BadLaunch(problem)
        drafts = session_requests(
            RequestIds(c.access_key, rid, c.secret),
            c.clock.now(),
            launch.count,
            image=launch.image,
            slots=launch.slots,
            command=launch.command,
            name=launch.name,
            project=launch.project,
            group=launch.group,
            cpu_only=launch.cpu_only,
            session_type=launch.session_type,
            mounts=launch.mounts,
        )
        # What the quota actor would reject for good, refused before sending, as the CLI
        # does (``fgpu session create``: the requests differ in their ids alone).
        why = invalid_request(drafts[0])
        if why is not None:
            raise BadLaunch(why)
        return await c.send_requests(drafts)

    async def destroy(self, session_id: str) -> str:
        return await self._client.destroy(session_id)

    async def admin(self, command: AdminCommand, request_id: str | None = None) -> str:
        rid = request_id or new_request_id()
        problem = request_id_problem(rid)
        if problem is not None:
            raise BadRequestId(problem)
        return await self._client.admin(command, request_id=rid)

    async def serve(self, command: ServeCommand, request_id: str | None = None) -> str:
        rid = request_id or new_request_id()
        problem = request_id_problem(rid)
        if problem is not None:
            raise BadRequestId(problem)
        return await self._client.serve(command, request_id=rid)

    async def logs(self, agent_id: str, session_id: str, tail: int) -> LogsReply:
        try:
            reply = await self._bus.ask(agent_id, LogsRequest(session_id=session_id, tail=tail))
        except AgentUnreachable as e:
            raise ShellRefused(str(e)) from e
        if not isinstance(reply, LogsReply):
            return LogsReply(ok=False, error=f"agent {agent_id}: {getattr(reply, 'error', reply)}")
        return reply

    async def follow(
        self,
        agent_id: str,
        session_id: str,
        tail: int,
        write: Callable[[bytes], Awaitable[None]],
    ) -> str:
        bus = self._bus
        try:
            closing = await follow_output(
                bus, bus.requester, agent_id, session_id, _Writer(write), tail=tail
            )
        except (ChannelRefused, AgentUnreachable) as e:
            raise ShellRefused(str(e)) from e
        return closing.reason

    async def shell(
        self,
        agent_id: str,
        session_id: str,
        end: ShellEnd,
        sizes: AsyncIterator[tuple[int, int]],
    ) -> str:
        bus = self._bus
        try:
            closing = await open_shell(bus, bus.requester, agent_id, session_id, end, sizes)
        except (ChannelRefused, AgentUnreachable) as e:
            raise ShellRefused(str(e)) from e
        if closing.exit_code is not None:
            return f"the shell exited with status {closing.exit_code}"
        return closing.reason

    async def services(self, agent_id: str, session_id: str) -> list[tuple[str, str, int]]:
        try:
            reply = await self._bus.ask(agent_id, ServicesRequest(session_id=session_id))
        except AgentUnreachable as e:
            raise ShellRefused(str(e)) from e
        if not isinstance(reply, ServicesReply):
            raise ShellRefused(f"agent {agent_id}: {getattr(reply, 'error', reply)}")
        if not reply.ok:
            raise ShellRefused(str(reply.error))
        return list(reply.services)

    async def app(self, agent_id: str, session_id: str, service: str, end: AppEnd) -> str:
        bus = self._bus
        try:
            closing = await open_app(bus, bus.requester, agent_id, session_id, service, end)
        except (ChannelRefused, AgentUnreachable) as e:
            raise ShellRefused(str(e)) from e
        return closing.reason

    async def aclose(self) -> None:
        await self._stack.aclose()


class _Writer:
    def __init__(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        self._write = write

    async def write(self, data: bytes) -> None:
        await self._write(data)


def acting_on(url: str) -> ActAs:
    """How the read API connects to the bus at ``url`` as a user, for the web UI."""

    async def act(access_key: str, secret: str) -> Acting:
        stack = AsyncExitStack()
        options = Identity(access_key, secret).options()
        try:
            conn = await stack.enter_async_context(
                nats_connection(url, name=f"fgpu-ui-{access_key}", **options)
            )
        except BaseException:
            await stack.aclose()
            raise
        sender = conn.sender(access_key)
        client = Client(conn.log, SystemClock(), access_key, sender=sender, secret=secret)
        return _UserConnection(stack, client, conn.bus)

    return act
