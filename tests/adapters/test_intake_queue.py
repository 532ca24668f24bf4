"""The intake's queue and senders: in memory and on the intake stream of a real server."""

from collections.abc import AsyncIterator

import pytest

from services.adapters.jetstream import JetStreamLog
from services.adapters.jetstream_intake import JetStreamIntake, JetStreamSender
from services.adapters.jetstream_stream import INTAKE_BACKLOG
from services.testing.memory_intake import MemoryIntake
from tests.support.intake_contract import Intake, IntakeContract

pytestmark = pytest.mark.anyio


def test_both_keep_as_many_waiting() -> None:
    assert MemoryIntake().backlog == INTAKE_BACKLOG


class TestMemoryIntake(IntakeContract):
    @pytest.fixture
    def intake(self) -> Intake:
        memory = MemoryIntake()
        return Intake(memory, memory.sender, memory.expire)


class TestJetStreamIntake(IntakeContract):
    @pytest.fixture
    async def intake(self, log: JetStreamLog) -> AsyncIterator[Intake]:
        # Handed again after a second (the stream's own clock): ``expire`` has nothing to do.
        queue = JetStreamIntake(log.client, ack_wait_s=1.0)
        yield Intake(queue, lambda key: JetStreamSender(log.client, key), lambda: None)
