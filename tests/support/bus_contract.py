"""What every bus (``services.ports.bus``) promises, as one test class to subclass.

A subclass provides the fixture ``bus``: an object that is both Heartbeats and
AgentRequests. Run against MemoryBus and the real NatsBus (``test_bus.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from services.ports import (
    AgentHandler,
    AgentReply,
    AgentRequest,
    AgentRequests,
    AgentUnreachable,
    Heartbeats,
    LogsReply,
    LogsRequest,
    RequestFailed,
)

__all__ = ["Bus", "BusContract"]

DEADLINE_S = 10.0


class Bus(Heartbeats, AgentRequests):
    """Both halves of the bus (a Protocol, for the fixtures' type), asking as
    ``requester``."""

    requester: str


async def _next(beats: AsyncIterator[str]) -> str:
    with anyio.fail_after(DEADLINE_S):
        return await anext(beats)


class BusContract:
    pytestmark = pytest.mark.anyio

    async def test_a_beat_is_heard_by_every_listener(self, bus: Bus) -> None:
        async with bus.heard() as first, bus.heard() as second:
            await bus.beat("a1")
            await bus.beat("a2")
            assert [await _next(first), await _next(first)] == ["a1", "a2"]
            assert [await _next(second), await _next(second)] == ["a1", "a2"]

    async def test_a_beat_with_nobody_listening_is_no_error(self, bus: Bus) -> None:
        await bus.beat("alone")
        async with bus.heard() as beats:
            await bus.beat("later")
            assert await _next(beats) == "later"  # the earlier beat is gone, not queued

    async def test_a_request_reaches_its_agent_only(self, bus: Bus) -> None:
        asked: list[tuple[str, AgentRequest]] = []

        def handler(agent_id: str) -> AgentHandler:
            async def answer(requester: str, request: AgentRequest) -> LogsReply:
                asked.append((agent_id, request))
                return LogsReply(ok=True, logs=f"{agent_id}:{request.session_id}:{requester}")

            return answer

        async with bus.serving("a1", handler("a1")), bus.serving("a2", handler("a2")):
            reply = await bus.ask("a2", LogsRequest(session_id="s1", tail=5))
        # The agent is told who asked: the access key the bus asks as.
        assert reply == LogsReply(ok=True, logs=f"a2:s1:{bus.requester}")
        assert asked == [("a2", LogsRequest(session_id="s1", tail=5))]

    async def test_no_agent_serving_is_unreachable(self, bus: Bus) -> None:
        with (
            anyio.fail_after(DEADLINE_S),
            pytest.raises(AgentUnreachable, match="no agent nobody is serving requests"),
        ):
            await bus.ask("nobody", LogsRequest(session_id="s1"), timeout_s=2)

    async def test_an_agent_that_stopped_serving_is_unreachable(self, bus: Bus) -> None:
        async def answer(requester: str, request: AgentRequest) -> LogsReply:
            return LogsReply(ok=True)

        async with bus.serving("a1", answer):
            assert (await bus.ask("a1", LogsRequest(session_id="s"))).ok
        with anyio.fail_after(DEADLINE_S), pytest.raises(AgentUnreachable):
            await bus.ask("a1", LogsRequest(session_id="s"), timeout_s=2)

    async def test_an_agent_too_slow_is_unreachable(self, bus: Bus) -> None:
        async def answer(requester: str, request: AgentRequest) -> LogsReply:
            await anyio.sleep(30)
            return LogsReply(ok=True)

        async with bus.serving("slow", answer):
            with (
                anyio.fail_after(DEADLINE_S),
                pytest.raises(AgentUnreachable, match=r"agent slow did not answer within 0\.2 s"),
            ):
                await bus.ask("slow", LogsRequest(session_id="s"), timeout_s=0.2)

    async def test_a_failing_handler_answers_that_it_failed(self, bus: Bus) -> None:
        async def answer(requester: str, request: AgentRequest) -> LogsReply:
            raise RuntimeError("the disk is on fire")

        async with bus.serving("a1", answer):
            reply = await bus.ask("a1", LogsRequest(session_id="s"))
            assert isinstance(reply, RequestFailed) and "disk is on fire" in reply.error
            # ... and goes on serving.
            assert isinstance(await bus.ask("a1", LogsRequest(session_id="s")), RequestFailed)

    async def test_a_slow_request_holds_up_no_other(self, bus: Bus) -> None:
        # The first waits until the second is answered: answered one after the other,
        # neither would ever be.
        entered, released = anyio.Event(), anyio.Event()

        async def answer(requester: str, request: AgentRequest) -> LogsReply:
            if request.session_id == "first":
                entered.set()
                await released.wait()
            else:
                released.set()
            return LogsReply(ok=True, logs=request.session_id)

        replies: dict[str, AgentReply] = {}

        async def ask(session_id: str) -> None:
            request = LogsRequest(session_id=session_id)
            replies[session_id] = await bus.ask("a1", request, timeout_s=DEADLINE_S)

        async with bus.serving("a1", answer):
            with anyio.fail_after(DEADLINE_S):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask, "first")
                    await entered.wait()
                    tg.start_soon(ask, "second")
        assert replies == {s: LogsReply(ok=True, logs=s) for s in ("first", "second")}

    async def test_a_pipe_hears_in_order_what_the_other_end_sends(self, bus: Bus) -> None:
        up, down = "fgpu.tty.a1.k.c1.up", "fgpu.tty.a1.k.c1.down"
        async with bus.pipe(listen=up, speak=down) as agent, bus.pipe(down, up) as user:
            for i in range(200):
                await user.send(b"%d" % i)
            await agent.send(b"back")
            at_agent, at_user = aiter(agent), aiter(user)
            with anyio.fail_after(DEADLINE_S):
                heard = [await anext(at_agent) for _ in range(200)]
                assert heard == [b"%d" % i for i in range(200)]
                assert await anext(at_user) == b"back"

    async def test_what_nobody_hears_is_lost_and_no_error(self, bus: Bus) -> None:
        up, down = "fgpu.tty.a1.k.c2.up", "fgpu.tty.a1.k.c2.down"
        async with bus.pipe(listen=down, speak=up) as alone:
            await alone.send(b"into the void")
        async with bus.pipe(listen=up, speak=down) as agent, bus.pipe(down, up) as user:
            await user.send(b"heard")
            with anyio.fail_after(DEADLINE_S):
                assert await anext(aiter(agent)) == b"heard"  # the earlier one is gone
