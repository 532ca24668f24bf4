"""Secrets on a cluster of the real actors and a dummy agent: a session gets its owner's
secret in its container's environment, opened by the agent; the value is nowhere on the
log; a reference to a secret the owner lacks (another's) is rejected with the reason."""

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest

from events import SessionErrored, SessionRejected, Slots, encode
from services.actors.bootstrap import publish_secrets_key
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.sealed_box import SealedBoxKey, seal
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import LABEL_SESSION
from services.domain.fold.cluster import ClusterState
from services.domain.status import SessionStatus
from tests.support.cluster import agent_config, running_cluster

pytestmark = pytest.mark.anyio

VALUE = "hf_s3cr3t-value-1234"
ASK = {"image": "fgpu/busybox:latest", "slots": Slots(cpu=100, mem=1 << 26), "cpu_only": True}
PRINTS = ("sh", "-c", "echo token=$HF_TOKEN; sleep 600")


@dataclass
class World:
    log: MemoryLog
    key: SealedBoxKey
    runtime: DummyRuntime

    def client(self, key: str) -> Client:
        return Client(self.log, SystemClock(), key)

    async def set(self, owner: str, name: str, value: str) -> None:
        await self.client(owner).secret_set(name, seal(self.key.public_key, value))

    async def status(self, sid: str, *wanted: SessionStatus) -> ClusterState:
        def reached(s: ClusterState) -> bool:
            return sid in s.sessions and s.sessions[sid].status in wanted

        with anyio.fail_after(30):
            return await self.client("alice").wait_until(reached)

    async def output(self, sid: str) -> str:
        [c] = await self.runtime.list({LABEL_SESSION: sid})
        return await self.runtime.logs(c.id)


@asynccontextmanager
async def world(*, agent_key: SealedBoxKey | None = None) -> AsyncIterator[World]:
    log, key, runtime = MemoryLog(), SealedBoxKey.generate(), DummyRuntime()
    await publish_secrets_key(log, SystemClock(), key.public_key)
    opener = key if agent_key is None else agent_key
    async with running_cluster(log, [(agent_config("a1"), runtime)], secrets=opener):
        yield World(log, key, runtime)


async def _log_bytes(log: MemoryLog) -> bytes:
    return b"\n".join([encode(r.event) async for batch in log.read(0) for r in batch])


async def test_the_agent_puts_the_latest_value_in_the_environment_and_the_log_never_holds_it() -> (
    None
):
    async with world() as w:
        await w.set("alice", "hf", "an older value")
        await w.set("alice", "hf", VALUE)
        [sid] = await w.client("alice").create(
            **ASK, command=PRINTS, secret_env=(("HF_TOKEN", "hf"),)
        )
        s = await w.status(sid, SessionStatus.RUNNING)
        assert f"token={VALUE}" in await w.output(sid)
        assert s.secrets.of("alice")["hf"].version == 2
        on_log = await _log_bytes(w.log)
    assert b"secret.set.v1" in on_log  # the scan reads what was written
    for form in (VALUE.encode(), base64.b64encode(VALUE.encode())):
        assert form not in on_log


async def test_a_secret_of_another_owner_is_rejected_with_the_reason() -> None:
    async with world() as w:
        await w.set("alice", "hf", VALUE)
        [sid] = await w.client("bob").create(
            **ASK, command=PRINTS, secret_env=(("HF_TOKEN", "hf"),)
        )
        s = await w.status(sid, SessionStatus.REJECTED)
    rejected = [
        r.event
        async for batch in w.log.read(0)
        for r in batch
        if isinstance(r.event, SessionRejected)
    ]
    assert [(e.code, e.reason) for e in rejected] == [
        ("secret", "no secret hf of bob's (fgpu secret set hf)")
    ]
    assert s.secrets.of("bob") == {}


async def test_a_removed_secret_is_refused_and_bob_cannot_remove_alices() -> None:
    async with world() as w:
        await w.set("alice", "hf", VALUE)
        await w.client("bob").secret_remove("hf")  # bob's own hf, which he lacks
        await w.client("alice").secret_remove("hf")
        [sid] = await w.client("alice").create(
            **ASK, command=PRINTS, secret_env=(("HF_TOKEN", "hf"),)
        )
        await w.status(sid, SessionStatus.REJECTED)
        await w.set("alice", "hf", VALUE)
        [again] = await w.client("alice").create(
            **ASK, command=PRINTS, secret_env=(("HF_TOKEN", "hf"),)
        )
        s = await w.status(again, SessionStatus.RUNNING)
    assert s.secrets.of("alice")["hf"].version == 1  # counted anew since its removal


async def test_an_agent_with_another_key_ends_the_session_in_error_naming_no_value() -> None:
    async with world(agent_key=SealedBoxKey.generate()) as w:
        await w.set("alice", "hf", VALUE)
        [sid] = await w.client("alice").create(
            **ASK, command=PRINTS, secret_env=(("HF_TOKEN", "hf"),)
        )
        await w.status(sid, SessionStatus.ERROR)
        errors = [
            r.event
            async for batch in w.log.read(0)
            for r in batch
            if isinstance(r.event, SessionErrored)
        ]
    assert [e.reason for e in errors] == ["agent a1 holds another secrets key than the cluster's"]
