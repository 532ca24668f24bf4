"""The intake in memory: people's requests waiting (``MemoryIntake``), handed in through
``sender(key)``; the fake that the intake's actor tests run on instead of JetStream, and
that passes the same contract (``tests/support/intake_contract.py``).

As the intake stream: at most ``backlog`` waiting per key, more refused at once; a
message known by the id of one taken before is taken once (the stream's dedupe: for its
window, here for good); handed out oldest first; one handed and not let go of is handed
again once ``expire`` says its time is up (JetStream: after the consumer's ack wait).
"""

from collections import deque
from collections.abc import AsyncGenerator, Sequence
from functools import partial

import anyio

from events import AnyEvent, encode_many
from services.ports import Handed, RequestsRefused

__all__ = ["MemoryIntake", "MemorySender"]


class MemorySender:
    def __init__(self, intake: "MemoryIntake", key: str) -> None:
        self._intake = intake
        self.key = key

    async def send(self, events: Sequence[AnyEvent]) -> None:
        self._intake.hand(self.key, encode_many(events), events[0].id if events else None)


class MemoryIntake:
    def __init__(self, *, backlog: int = 16, wait_s: float = 0.05) -> None:
        self.backlog = backlog
        self.wait_s = wait_s
        self._next = 0
        self._taken: set[str] = set()  # the ids of the messages taken
        self._waiting: deque[tuple[int, str, bytes]] = deque()  # not handed out yet
        self._out: dict[int, tuple[str, bytes]] = {}  # handed out, not let go of
        self._more = anyio.Event()
        self._let_go = anyio.Event()

    def sender(self, key: str) -> MemorySender:
        return MemorySender(self, key)

    def hand(self, key: str, data: bytes, message_id: str | None = None) -> None:
        """What the server does with a message on ``fgpu.in.<key>`` (``message_id``: its
        ``Nats-Msg-Id``). Raises RequestsRefused when ``key`` has ``backlog`` waiting
        already."""
        if message_id is not None and message_id in self._taken:
            return
        held = sum(1 for _, k, _ in self._waiting if k == key)
        held += sum(1 for k, _ in self._out.values() if k == key)
        if held >= self.backlog:
            raise RequestsRefused(f"the intake holds {held} requests of {key}")
        self._next += 1
        if message_id is not None:
            self._taken.add(message_id)
        self._waiting.append((self._next, key, bytes(data)))
        self._more.set()

    def expire(self) -> None:
        """Every message handed out and not let go of is handed out again, in its order."""
        again = sorted((n, k, d) for n, (k, d) in self._out.items())
        self._out.clear()
        self._waiting = deque(sorted([*again, *self._waiting]))
        self._more.set()

    def waiting(self) -> int:
        """Messages not let go of yet (waiting or handed out)."""
        return len(self._waiting) + len(self._out)

    async def drained(self) -> None:
        """Until every message handed in is let go of. Never returns if that does not
        happen: put a deadline around it."""
        while self.waiting():
            self._let_go = anyio.Event()
            await self._let_go.wait()

    async def handed(self) -> AsyncGenerator[list[Handed], None]:
        yield []
        while True:
            if not self._waiting:
                self._more = anyio.Event()
                with anyio.move_on_after(self.wait_s):
                    await self._more.wait()
            batch: list[Handed] = []
            while self._waiting and len(batch) < 256:
                n, key, data = self._waiting.popleft()
                self._out[n] = (key, data)
                batch.append(Handed(key, data, partial(self._done, n)))
            yield batch

    async def _done(self, n: int) -> None:
        self._out.pop(n, None)
        self._let_go.set()
