"""JetStreamLog as a confined identity: a connection whose permissions let it read the log
through its own consumers alone (``permissions.log_reads``: its reader names, and the
durables it follows) keeps every promise of the EventLog contract, and its reads take
only names of its own, never a consumer another holds.

The server's users are static here (an administrator with every right, the confined
key); the gatekeeper hands services the same lists (``test_adversarial``)."""

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, aclosing
from typing import Any

import anyio
import pytest

from events import subjects as subj
from services.adapters import jetstream, nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.jetstream_pull import Puller
from services.adapters.jetstream_readers import reader_names_of
from services.domain.access.permissions import READS_AT_ONCE, inbox, log_reads, reader_names
from services.ports import EventLog, LogError
from tests.support.log_contract import (
    DEADLINE_S,
    EventLogContract,
    PublishRaw,
    admitted,
    read_all,
    take,
)
from tests.support.nats_env import fresh_stream

KEY, SECRET = "SKCONFINED000000000000", "confined-secret"
FOLLOWS = ("worker", "fresh", "one", "two", "victim")  # the durables the tests follow
TAKEN = "fgpu.nothing"  # the filter of a consumer another made under one of KEY's names


def _config() -> str:
    confined = {
        "publish": {"allow": ["fgpu.>", *log_reads(KEY, FOLLOWS)]},
        "subscribe": {"allow": [f"{inbox(KEY)}.>"]},
    }
    return f"""
accounts {{
  FGPU {{
    jetstream: enabled
    users: [
      {{ user: admin, password: admin }}
      {{ user: "{KEY}", password: "{SECRET}", permissions: {json.dumps(confined)} }}
    ]
  }}
}}
"""


class Logs:
    """The administrator's log and the confined key's, on one server of their own."""

    def __init__(self, admin: JetStreamLog, confined: JetStreamLog) -> None:
        self.admin = admin
        self.confined = confined

    async def take_name(self, name: str) -> None:
        """A consumer of KEY's name ``name``, made by another (as another process of the
        key would), hearing nothing."""
        config = {"name": name, "ack_policy": "none", "filter_subject": TAKEN}
        body = json.dumps({"stream_name": subj.STREAM, "config": config}).encode()
        await self.admin._api("take a name", f"CONSUMER.CREATE.{subj.STREAM}.{name}.{TAKEN}", body)

    async def consumers(self) -> dict[str, dict[str, Any]]:
        """Every consumer of the stream, by name: its configuration."""
        found = await self.admin._api("consumers", f"CONSUMER.LIST.{subj.STREAM}")
        return {c["name"]: c["config"] for c in found.get("consumers") or []}


@pytest.fixture
async def logs() -> AsyncIterator[Logs]:
    with nats_server.nats_server(config=_config()) as server:
        async with AsyncExitStack() as stack:
            admin = await connect(server.url, user="admin", password="admin")
            stack.push_async_callback(admin.close)
            await admin.create_or_update_stream()
            confined = await connect(server.url, user=KEY, password=SECRET, inbox_prefix=inbox(KEY))
            stack.push_async_callback(confined.close)
            yield Logs(admin, confined)


class TestConfinedLog(EventLogContract):
    @pytest.fixture
    def events(self, logs: Logs) -> JetStreamLog:
        return logs.confined

    async def test_a_subject_outside_the_stream_is_refused(
        self, events: EventLog, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The contract's test, on a request timeout of a second: the server answers no
        request it denies, so the refusal is the timeout (10 s otherwise)."""
        monkeypatch.setattr(jetstream, "TIMEOUT_S", 1.0)
        await super().test_a_subject_outside_the_stream_is_refused(events)

    @pytest.fixture
    def publish_raw(self, logs: Logs) -> PublishRaw:
        async def publish(subject: str, payload: bytes) -> None:
            await logs.confined.nc.publish(subject, payload)
            await logs.confined.nc.flush()

        return publish

    @pytest.fixture
    def made_anew(self, logs: Logs) -> Callable[[], Awaitable[JetStreamLog]]:
        async def anew() -> JetStreamLog:
            await fresh_stream(logs.admin)  # the administrator's, as in a deployment
            return logs.confined

        return anew


pytestmark = pytest.mark.anyio


async def test_reads_through_the_keys_own_names_and_the_bulk_reader_too(logs: Logs) -> None:
    for _ in range(3):
        await logs.confined.append(subj.LEDGER, admitted())
    assert reader_names_of(logs.confined.client) is not None
    raw = [s for b in [x async for x in logs.confined.read_raw(0, child_from=0)] for s in b.seqs]
    assert raw == [1, 2, 3]
    assert await logs.consumers() == {}  # each read's consumer deleted as it ended


async def test_a_read_passes_over_a_name_another_holds_and_changes_it_not(logs: Logs) -> None:
    names = reader_names(KEY)
    for name in names[1:]:
        await logs.take_name(name)
    await logs.confined.append(subj.LEDGER, admitted())
    async with aclosing(logs.confined.tail(0)) as batches:
        [record] = await take(batches, 1)
        held = await logs.consumers()
        assert held.keys() == set(names)
        assert held[names[0]]["filter_subject"] == subj.STREAM_WILDCARD  # the tail's own
    assert record.seq == 1
    assert {n: c["filter_subject"] for n, c in (await logs.consumers()).items()} == dict.fromkeys(
        names[1:], TAKEN
    )


async def test_a_read_when_every_name_is_held_fails_and_changes_none(logs: Logs) -> None:
    for name in reader_names(KEY):
        await logs.take_name(name)
    before = await logs.consumers()
    with anyio.fail_after(DEADLINE_S), pytest.raises(LogError, match="every one is taken"):
        await read_all(logs.confined, 0, until=1)
    assert await logs.consumers() == before


async def test_as_many_reads_at_once_as_the_key_has_names(logs: Logs) -> None:
    got: dict[int, list[int]] = {}

    async def tail(n: int, ready: anyio.Event) -> None:
        async with aclosing(logs.confined.tail(0)) as batches:
            first = await anext(batches)
            ready.set()
            got[n] = [r.seq for r in first + await take(batches, 2 - len(first))]

    async with anyio.create_task_group() as tg:
        for n in range(READS_AT_ONCE):
            ready = anyio.Event()
            tg.start_soon(tail, n, ready)
            if n == 0:
                await logs.confined.append(subj.LEDGER, admitted())
            with anyio.fail_after(DEADLINE_S):
                await ready.wait()
        assert len(await logs.consumers()) == READS_AT_ONCE
        await logs.confined.append(subj.LEDGER, admitted())
    assert got == {n: [1, 2] for n in range(READS_AT_ONCE)}
    assert await logs.consumers() == {}


@pytest.mark.parametrize("read", ["tail", "follow"])
async def test_a_read_whose_consumer_is_deleted_fails(
    logs: Logs, read: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted under it (by an administrator, or its server gone): the read raises
    LogError within a quiet pull, where it would ask the server for ever."""
    monkeypatch.setattr(Puller, "_EXPIRES_S", 0.3)
    await logs.confined.append(subj.LEDGER, admitted())
    reads = logs.confined.tail(0) if read == "tail" else logs.confined.follow("victim")
    async with aclosing(reads) as batches:
        await take(batches, 1)
        [name] = await logs.consumers()
        await logs.admin._api("delete", f"CONSUMER.DELETE.{subj.STREAM}.{name}")
        with anyio.fail_after(DEADLINE_S), pytest.raises(LogError, match="gone"):
            await anext(batches)
