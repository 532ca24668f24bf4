"""The ``fgpu`` command's own promises: ``audit --at`` reads the log once, ``session create
--wait`` sees its sessions settle however soon they do, and the commands that run an agent
take the same options."""

import dataclasses
import json
from collections.abc import AsyncGenerator, Iterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest
import typer
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal
from typer.testing import CliRunner

from events import Malformed, Record, SessionRequested, Slots
from events import subjects as subj
from services.actors.common import SystemClock
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import connect
from services.cli import audit_cmd
from services.cli.daemon_cmd import AgentOptions
from services.cli.main import app
from services.client import Client
from services.domain.state import ClusterState, fold
from services.testing import MemoryLog
from tests.cluster import GIB, agent_config, running_cluster

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
IMAGE = "fgpu/busybox:latest"


# ---- fgpu audit --at ----------------------------------------------------------------------


class _CountingLog(MemoryLog):
    """A MemoryLog that counts the reads asked of it."""

    def __init__(self) -> None:
        super().__init__(batch_size=3)
        self.reads = 0

    def read(self, after: int = 0, *, until: int | None = None) -> AsyncGenerator[list[Record]]:
        self.reads += 1
        return super().read(after, until=until)


# Minutes after T0 each record is stamped with (None: a payload that is no event). Clocks
# disagree: a writer behind the others stamps events earlier than ones before them.
_STAMPS = [0, 2, 1, None, 3, 5, 4, 4, 9, None, 6, 7, 12, 8]


async def _log_with_lagging_clocks() -> tuple[_CountingLog, list[Record]]:
    log = _CountingLog()
    for n, minutes in enumerate(_STAMPS):
        subject = subj.request("alice", f"s{n}")
        if minutes is None:
            await log.publish_raw(subject, b"not an event")
            continue
        e = SessionRequested(
            id=f"req-{n}",
            at=T0 + timedelta(minutes=minutes),
            actor="alice",
            session_id=f"s{n}",
            owner="alice",
            image=IMAGE,
            slots=Slots(cpu=1000, mem=GIB, fgpu=50),
        )
        await log.append(subject, e)
    records = [r async for batch in log.read(0) for r in batch]
    return log, records


def _expected(records: list[Record], at: datetime) -> tuple[ClusterState, datetime | None]:
    """What the read API says: the fold up to the last event stamped at or before ``at``."""
    end = max(
        (r.seq for r in records if not isinstance(r.event, Malformed) and r.event.at <= at),
        default=0,
    )
    last = records[end - 1].event if end else None
    return fold(records[:end]), None if last is None or isinstance(last, Malformed) else last.at


def _instants() -> Iterator[datetime]:
    for half_minutes in range(-2, 2 * 13):
        yield T0 + timedelta(seconds=30 * half_minutes)


@pytest.mark.parametrize("held", [10_000, 2, 0])
def test_audit_at_folds_up_to_the_last_event_in_time(
    held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever order the clocks put the stamps in, the state is the read API's; in one
    read of the log while the records past the instant fit in hand, and else a second
    read of the stretch they were dropped from."""
    monkeypatch.setattr(audit_cmd, "_HELD", held)

    async def check() -> None:
        log, records = await _log_with_lagging_clocks()
        for at in _instants():
            log.reads = 0
            s, when = await audit_cmd._replay(log, at=at)
            want, want_when = _expected(records, at)
            assert (s.last_seq, set(s.sessions), s.malformed, when) == (
                want.last_seq,
                set(want.sessions),
                want.malformed,
                want_when,
            ), at
            if held >= len(records):
                assert log.reads == 1, at

    anyio.run(check, backend="asyncio")


# ---- fgpu session create --wait -----------------------------------------------------------


async def _cluster(url: str, *, task_status: TaskStatus[None]) -> None:
    """Quota, scheduler and one agent (dummy runtime), until cancelled; bob may hold
    nothing."""
    events = await connect(url, name="test-cluster")
    try:
        await events.create_or_update_stream()
        await Client(events, SystemClock(), "admin").set_policy(
            "bob", max_sessions=0, max_slots=None
        )
        async with running_cluster(events, [(agent_config("a1"), DummyRuntime())]):
            task_status.started()
            await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await events.close()


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    """A NATS server of its own, with a cluster whose agent registered long before any
    ``fgpu session create`` here."""
    with nats_server.nats_server() as server, start_blocking_portal("asyncio") as portal:
        running, _ = portal.start_task(_cluster, server.url)
        try:
            yield server.url
        finally:
            running.cancel()


def _create(url: str, key: str, *command: str) -> tuple[int, str]:
    args = ["--nats", url, "--access-key", key, "session", "create", "--image", IMAGE]
    args += ["--fgpu", "0.5", "--wait", "--timeout", "30", "--json", "--", *command]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stdout


def test_create_wait_sees_a_session_placed_on_an_agent_registered_before(
    cluster_url: str,
) -> None:
    """The placement is folded only on an agent the fold knows: --wait must fold what
    came before its request too, or it waits in vain."""
    code, out = _create(cluster_url, "alice", "sleep", "infinity")
    assert code == 0, out
    [session] = _sessions(out)
    assert session["status"] == "RUNNING" and session["agent"] == "a1"


def test_create_wait_sees_sessions_that_end_at_once(cluster_url: str) -> None:
    code, out = _create(cluster_url, "alice", "true")
    assert code == 0, out
    [ran] = _sessions(out)
    assert ran["status"] in ("RUNNING", "TERMINATED")
    code, out = _create(cluster_url, "bob", "true")  # refused by bob's policy at once
    assert code == 1, out
    [refused] = _sessions(out)
    assert refused["status"] == "REJECTED"


def _sessions(out: str) -> list[dict[str, object]]:
    sessions: list[dict[str, object]] = json.loads(out)["sessions"]
    return sessions


# ---- fgpu up, fgpu agent ------------------------------------------------------------------


def _options(command: str) -> set[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    found = group.commands[command]
    return {p.name for p in found.params if isinstance(p, typer.core.TyperOption) and p.name}


def test_up_and_agent_take_every_agent_option() -> None:
    agent_options = {f.name for f in dataclasses.fields(AgentOptions)}
    assert _options("agent") == agent_options
    assert _options("up") == agent_options | {"store", "port", "api_port", "no_api"}


@pytest.mark.parametrize("command", ["up", "agent"])
def test_a_bad_agent_option_is_a_clear_error(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--mock-gpus", "1", "--gpu-mem", "lots"])
    assert result.exit_code == 2
    assert "lots" in result.stderr
