"""NatsBus when its server stops: only the bus port's errors, and nothing hangs.

Each of ``beat``, ``heard``, ``ask`` and ``serving`` meets a server stopped before it
starts and one stopped in its middle (as a request is sent, while an agent answers, while
a listener or an agent waits). A lost beat is logged and dropped; a request fails with
AgentUnreachable as soon as the connection is seen to go, not when its timeout ends; a
block entered with no connection raises AgentUnreachable, and one left after the
connection went raises nothing. Every wait is bounded by ``anyio.fail_after``.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import pytest
from structlog.testing import capture_logs

from events import subjects as subj
from services.adapters import nats_server
from services.adapters.nats_bus import NatsBus
from services.adapters.nats_connection import nats_connection
from services.ports import AgentRequest, AgentUnreachable, LogsReply, LogsRequest
from tests.support.bus_contract import DEADLINE_S
from tests.support.nats_env import Stoppable, Trigger

pytestmark = pytest.mark.anyio

# Longer than every deadline here: a request that ends at all ended by the lost connection.
PATIENT_S = 10 * DEADLINE_S


@dataclass
class Doomed(Stoppable):
    """A bus on a server of its own, which the test stops."""

    bus: NatsBus


@pytest.fixture
async def doomed(server: nats_server.NatsServer) -> AsyncIterator[Doomed]:
    async with nats_connection(server.url) as conn:
        yield Doomed(server, conn.log.nc, conn.bus)


def _to(subject: str) -> Trigger:
    return lambda to, _: to == subject


async def _answer(requester: str, request: AgentRequest) -> LogsReply:
    return LogsReply(ok=True, logs=request.session_id)


async def _ask(bus: NatsBus) -> object:
    return await bus.ask("a1", LogsRequest(session_id="s1"), timeout_s=PATIENT_S)


async def _listen(bus: NatsBus) -> object:
    async with bus.heard():
        return None


async def _serve(bus: NatsBus) -> object:
    async with bus.serving("a1", _answer):
        return None


CALLS: dict[str, Callable[[NatsBus], Awaitable[object]]] = {
    "ask": _ask,
    "heard": _listen,
    "serving": _serve,
}


@pytest.mark.parametrize("call", CALLS)
async def test_a_call_after_the_server_went_is_unreachable_at_once(
    doomed: Doomed, call: str
) -> None:
    await doomed.gone()
    with anyio.fail_after(DEADLINE_S), pytest.raises(AgentUnreachable, match="connection to NATS"):
        await CALLS[call](doomed.bus)


async def test_beats_across_a_stop_are_dropped_and_those_seen_lost_are_logged(
    doomed: Doomed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beat as the server stops goes nowhere, unnoticed; one once the client has seen
    the loss is logged. Neither raises."""
    doomed.stop_on_publish(monkeypatch, _to(subj.heartbeat("a1")))
    with capture_logs() as logs, anyio.fail_after(DEADLINE_S):
        await doomed.bus.beat("a1")
        await doomed.gone()
        await doomed.bus.beat("a2")
    lost = [e["agent"] for e in logs if e["event"] == "heartbeat.lost"]
    assert lost == ["a2"]
    assert doomed.server.process.poll() is not None


async def test_a_request_whose_server_stops_as_it_is_sent_is_unreachable(
    doomed: Doomed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request waits for an answer when the client sees the connection go: it fails
    then, long before its timeout."""
    doomed.stop_on_publish(monkeypatch, _to(subj.agent_request("a1", doomed.bus.requester)))
    with anyio.fail_after(DEADLINE_S), pytest.raises(AgentUnreachable, match="lost"):
        await _ask(doomed.bus)
    assert doomed.server.process.poll() is not None, "the request was never sent"


async def test_an_agent_answering_when_the_server_stops_leaves_only_the_asker_unreachable(
    doomed: Doomed,
) -> None:
    """The server stops while the agent works on a request: the asker is unreachable, the
    answer that can no longer be sent is dropped (nothing of the bus's reaches nats-py's
    error callback), and the agent's block ends without error."""
    answered = anyio.Event()

    async def answer_once_gone(requester: str, request: AgentRequest) -> LogsReply:
        await doomed.gone()
        answered.set()
        return LogsReply(ok=True)

    with capture_logs() as logs, anyio.fail_after(DEADLINE_S):
        async with doomed.bus.serving("a1", answer_once_gone):
            with pytest.raises(AgentUnreachable, match="lost"):
                await _ask(doomed.bus)
            await answered.wait()
    reported = [e["error"] for e in logs if e["event"] == "nats.error"]
    assert not [e for e in reported if e.startswith(("LogError", "AgentUnreachable"))]
    # The answer was dropped in the agent's own callback, not by a failure of the handler.
    assert not [e for e in logs if e["event"] == "agent.request_failed"]


async def test_an_agent_serving_when_the_server_stops_leaves_its_block_quietly(
    doomed: Doomed,
) -> None:
    with anyio.fail_after(DEADLINE_S):
        async with doomed.bus.serving("a1", _answer):
            assert await doomed.bus.ask("a1", LogsRequest(session_id="s1")) == LogsReply(
                ok=True, logs="s1"
            )
            await doomed.gone()


async def test_a_listener_stays_through_a_lost_server_and_hears_again_once_back(
    doomed: Doomed,
) -> None:
    """A listener waiting when the server stops is not failed: once the client has
    reconnected (to a server on the same port) it hears beats again, and its block ends
    quietly."""
    server = doomed.server
    with anyio.fail_after(DEADLINE_S):
        async with doomed.bus.heard() as beats:
            await doomed.bus.beat("a1")
            assert await anext(beats) == "a1"
            await doomed.gone()
            back = await anyio.to_thread.run_sync(
                lambda: nats_server.start(server.store_dir, port=server.port)
            )
            try:
                await doomed.until(lambda: doomed.nc.is_connected)
                await doomed.bus.beat("a2")
                assert await anext(beats) == "a2"
            finally:
                await anyio.to_thread.run_sync(back.stop)
