"""JetStreamLog passes the EventLog contract against a real nats-server."""

from collections.abc import AsyncIterator

import pytest
from log_contract import EventLogContract, PublishRaw

from events import subjects as subj
from services.adapters.jetstream import JetStreamLog


class TestJetStreamLog(EventLogContract):
    @pytest.fixture
    async def events(self, log: JetStreamLog) -> AsyncIterator[JetStreamLog]:
        # The ``log`` fixture deletes and creates the stream, but a file stream created again
        # at once can come back with the deleted one's messages (seen with nats-server 2.15): the
        # contract counts from sequence 1, so make sure it does.
        for _ in range(20):
            if await log.last_seq() == 0:
                yield log
                return
            await log.js.delete_stream(subj.STREAM)
            await log.ensure_stream()
        pytest.fail("the stream kept its messages through 20 deletions")

    @pytest.fixture
    def publish_raw(self, log: JetStreamLog) -> PublishRaw:
        async def publish(subject: str, payload: bytes) -> None:
            await log.nc.publish(subject, payload)
            await log.nc.flush()

        return publish
