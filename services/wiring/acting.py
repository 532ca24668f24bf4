"""The web UI's writes on the bus: a signed-in user's own connection, as the CLI's.

``acting_on(url)`` is the read API's ``ActAs``: it connects to ``url`` as the user (the
access key as user, its secret as password, replies in the user's own inbox), so the
servers and the gatekeeper give this connection the user's permissions and no more, and
its requests go to the intake on the user's own subject, as ``fgpu session rm`` sends
them (``services.client.Client``).
"""

from contextlib import AsyncExitStack

from services.adapters.nats_connection import nats_connection
from services.adapters.system_clock import SystemClock
from services.api.browser import ActAs, Acting
from services.client import Client
from services.wiring.identity import Identity

__all__ = ["acting_on"]


class _UserConnection:
    def __init__(self, stack: AsyncExitStack, client: Client) -> None:
        self._stack = stack
        self._client = client

    async def destroy(self, session_id: str) -> str:
        return await self._client.destroy(session_id)

    async def aclose(self) -> None:
        await self._stack.aclose()


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
        return _UserConnection(stack, client)

    return act
