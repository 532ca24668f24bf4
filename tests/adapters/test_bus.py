"""The bus contract on MemoryBus and on NATS."""

from collections.abc import AsyncIterator

import pytest

from services.adapters.nats_bus import NatsBus
from services.adapters.nats_connection import nats_connection
from services.testing import MemoryBus
from tests.support.bus_contract import BusContract


class TestMemoryBus(BusContract):
    @pytest.fixture
    def bus(self) -> MemoryBus:
        return MemoryBus()


class TestNatsBus(BusContract):
    @pytest.fixture
    async def bus(self, nats_url: str) -> AsyncIterator[NatsBus]:
        async with nats_connection(nats_url) as conn:
            yield conn.bus


@pytest.mark.anyio
async def test_a_pipe_hears_nothing_a_consumer_delivers_onto_its_subject() -> None:
    """A consumer whose deliver subject is a pipe's (anyone in the log's account who may
    make a consumer can point one there: nats-server does not check deliver subjects
    against permissions) brings stored records, under their own subjects: the pipe takes
    none of them for bytes of its channel, and still hears what is sent on it."""
    import json

    import anyio

    from services.adapters import nats_server

    up = "fgpu.tty.a1.AKvic.c1.up"
    with nats_server.nats_server() as server:
        async with nats_connection(server.url) as conn, conn.bus.pipe(up, "nowhere") as pipe:
            nc = conn.client.nc
            await nc.jetstream().add_stream(name="OTHER", subjects=["other.>"])
            await nc.jetstream().publish("other.x", b"stored bytes")
            consumer = {
                "name": "spy",
                "deliver_subject": up,
                "deliver_policy": "all",
                "filter_subject": "other.>",
            }
            body = json.dumps({"stream_name": "OTHER", "config": consumer}).encode()
            await nc.request("$JS.API.CONSUMER.CREATE.OTHER.spy.other.>", body, timeout=5)
            with anyio.fail_after(10):
                for _ in range(1000):  # until the stored record was delivered here
                    info = await nc.jetstream().consumer_info("OTHER", "spy")
                    if info.delivered.stream_seq >= 1:
                        break
                    await anyio.sleep(0.01)
                await nc.publish(up, b"sent on the channel")
                heard = await pipe.__anext__()
            assert heard == b"sent on the channel"
