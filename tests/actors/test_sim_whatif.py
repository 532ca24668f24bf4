"""``fgpu sim whatif``: a resource group's requests read from the log and replayed under
another policy, beside what happened; worked out by hand on a small history. It only
reads the log (its last sequence is the same after), and only an identity that may read
the whole log may run it: a person's keypair is refused by the server."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from events import (
    AdminApplied,
    AgentRegistered,
    AnyEvent,
    CreateKeypair,
    CreateUser,
    GpuInfo,
    SessionAdmitted,
    SessionCancelled,
    SessionDestroyRequested,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    Slots,
)
from events import DevicePlacement as Device
from events import SessionTerminated as Ended
from events import subjects as subj
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.cli.main import app
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.provenance import Provenance, stamp
from services.ports import EventLog
from services.sim.timed import Outcome
from services.sim.whatif import read_group, whatif
from tests.support.tenancy_env import Secured, secured_cluster

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
IMAGE = "fgpu/busybox:latest"
OWNER = "ana"


def _at(s: float) -> Provenance:
    return Provenance(OWNER, T0 + timedelta(seconds=s))


def _agent(agent_id: str, group: str) -> tuple[str, AnyEvent]:
    gpu = GpuInfo(index=0, uuid=f"GPU-{agent_id}", model="T4", mem=16 << 30, sm_count=40)
    e = stamp(
        AgentRegistered,
        _at(0),
        agent_id=agent_id,
        capacity=Slots(cpu=8000, mem=32 << 30, fgpu=1000),
        gpus=(gpu,),
        fgpu_per_gpu=1000,
        images=(IMAGE,),
        runtime="dummy",
        group=group,
    )
    return subj.agent(agent_id), e


def _session(
    sid: str, fgpu: int, asked: float, group: str = "lab"
) -> tuple[SessionRequested, list[tuple[str, AnyEvent]]]:
    slots = Slots(cpu=1000, mem=1 << 30, fgpu=fgpu)
    r = stamp(SessionRequested, _at(asked), session_id=sid, owner=OWNER, image=IMAGE, slots=slots)
    r = SessionRequested(**{**{f: getattr(r, f) for f in r.__struct_fields__}, "group": group})
    return r, [(subj.request(OWNER, sid), r)]


def _admit(sid: str, s: float) -> tuple[str, AnyEvent]:
    return subj.ADMISSION, stamp(SessionAdmitted, _at(s), session_id=sid, owner=OWNER)


def _run(sid: str, agent: str, fgpu: int, placed: float, ended: float) -> list[tuple[str, Any]]:
    slots = Slots(cpu=1000, mem=1 << 30, fgpu=fgpu)
    devices = (Device(gpu_index=0, fgpu=fgpu),)
    where = subj.agent_session(agent, sid)
    return [
        (
            subj.LEDGER,
            stamp(
                SessionScheduled,
                _at(placed),
                session_id=sid,
                owner=OWNER,
                agent_id=agent,
                slots=slots,
                devices=devices,
            ),
        ),
        (
            where,
            stamp(SessionRunning, _at(placed), session_id=sid, agent_id=agent, container_id="c"),
        ),
        (where, stamp(Ended, _at(ended), session_id=sid, agent_id=agent, exit_code=0, reason="x")),
    ]


def history() -> list[tuple[str, AnyEvent]]:
    """Group lab (agents a and b, one GPU each) under spread: s1 and s2 (half a GPU each)
    go one to each agent, so s3 (a whole GPU, at 20) waits until both leave at 100 (80 s),
    and s6 (a whole GPU, at 40) is given up on by its owner at 60. s4 is refused at
    admission; s5 is another group's, on agent c."""
    out = [_agent("a", "lab"), _agent("b", "lab"), _agent("c", "default")]
    _, asked = _session("s1", 500, 0)
    out += [*asked, _admit("s1", 0), *_run("s1", "a", 500, 0, 100)]
    _, asked = _session("s2", 500, 5)
    out += [*asked, _admit("s2", 5), *_run("s2", "b", 500, 5, 100)]
    _, asked = _session("s3", 1000, 20)
    queued = stamp(SessionQueued, _at(20), session_id="s3", reason="waiting")
    out += [*asked, _admit("s3", 20), (subj.LEDGER, queued), *_run("s3", "a", 1000, 100, 150)]
    _, asked = _session("s4", 500, 30)
    refused = stamp(SessionRejected, _at(30), session_id="s4", owner=OWNER, code="q", reason="q")
    out += [*asked, (subj.ADMISSION, refused)]
    _, asked = _session("s5", 500, 30, group="default")
    out += [*asked, _admit("s5", 30), *_run("s5", "c", 500, 30, 40)]
    _, asked = _session("s6", 1000, 40)
    destroy = stamp(SessionDestroyRequested, _at(60), session_id="s6", requester=OWNER)
    cancelled = stamp(SessionCancelled, _at(60), session_id="s6", owner=OWNER, reason="gone")
    out += [*asked, _admit("s6", 40), (subj.LEDGER, queued)]
    out += [(subj.request(OWNER, "s6"), destroy), (subj.LEDGER, cancelled)]
    return out


async def _write(log: EventLog) -> None:
    for subject, e in history():
        await log.append(subject, e)


@pytest.mark.anyio
async def test_what_happened_is_read_and_another_policy_replayed() -> None:
    log = MemoryLog()
    await _write(log)
    recorded = await read_group(log, "lab", None, None)
    assert [a.agent_id for a in recorded.agents] == ["a", "b"]
    assert [a.request.session_id for a in recorded.arrivals] == ["s1", "s2", "s3", "s6"]
    # Each arrives when admitted and holds its share as long as it did; s6 never did: to
    # the end of the range, unless its owner gives up first (at 60).
    assert [(a.arrival_s, a.duration_s, a.withdraw_s) for a in recorded.arrivals] == [
        (0, 100, None),
        (5, 95, None),
        (20, 50, None),
        (40, 110, 60),
    ]
    assert (recorded.refused, recorded.span_s, recorded.happened.capacity) == (1, 150, 2000)
    assert recorded.happened.outcomes == [
        Outcome("placed", 0),
        Outcome("placed", 0),
        Outcome("placed", 80),
        Outcome("cancelled", None),
    ]
    assert recorded.happened.allocated == [(0, 500), (5, 1000), (150, 0)]

    # Under pack, s1 and s2 share agent a, and s3 takes b at once; s6 still waits for a
    # whole GPU when its owner gives up (b frees at 70).
    packed = whatif(recorded, "pack", samples=3)
    assert packed["happened"]["wait_s"] == {"p50": 0.0, "p99": 80.0, "mean": 26.667}
    assert packed["would_have"]["wait_s"] == {"p50": 0.0, "p99": 0.0, "mean": 0.0}
    assert packed["would_have"]["cancelled"] == packed["happened"]["cancelled"] == 1
    # (5 s at 500 + 95 s at 1000 + 50 s at 1000) / 150 s of 2000, against (0-5: 500,
    # 5-20: 1000, 20-70: 2000, 70-100: 1000) / 150 s of 2000
    assert packed["happened"]["utilisation_pct"]["mean"] == pytest.approx(49.1667, abs=1e-4)
    assert packed["would_have"]["utilisation_pct"]["mean"] == pytest.approx(49.1667, abs=1e-4)
    assert packed["would_have"]["utilisation_pct"]["curve"][1] == [50.0, 100.0]
    assert packed["happened"]["utilisation_pct"]["curve"][1] == [50.0, 50.0]
    # Under the policy it ran under, the replay gives what happened.
    spread = whatif(recorded, "spread", samples=3)
    assert spread["would_have"] == spread["happened"]
    # A range: what was asked for in it, on agents where s1 and s2 (asked for before)
    # still hold half a GPU each until 100: s3 waits for them under pack too.
    late = await read_group(log, "lab", T0 + timedelta(seconds=10), None)
    assert [a.request.session_id for a in late.arrivals] == ["s3", "s6"]
    assert late.arrivals[0].arrival_s == 10 and late.span_s == 140
    assert [(h.request.session_id, h.placed.agent_id, h.until_s) for h in late.held] == [
        ("s1", "a", 90),
        ("s2", "b", 90),
    ]
    assert late.happened.allocated == [(0, 1000), (140, 0)]
    then = whatif(late, "pack")
    assert then["held_at_start"] == 2
    assert (
        then["would_have"]["wait_s"]
        == then["happened"]["wait_s"]
        == {
            "p50": 80.0,
            "p99": 80.0,
            "mean": 80.0,
        }
    )


def _cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner(env=env).invoke(app, list(args))


def test_sim_whatif_reads_the_log_and_changes_nothing() -> None:
    with nats_server.nats_server() as server:

        async def write() -> int:
            log = await connect(server.url)
            try:
                await log.create_or_update_stream()
                await _write(log)
                return await log.last_seq()
            finally:
                await log.close()

        async def last() -> int:
            log = await connect(server.url)
            try:
                return await log.last_seq()
            finally:
                await log.close()

        before = anyio.run(write)
        args = ["--nats", server.url, "sim", "whatif", "--group", "lab", "--policy", "pack"]
        result = _cli(*args, "--json", "--samples", "3")
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert (out["group"], out["policy"], out["agents"], out["fgpu"]) == ("lab", "pack", 2, 2000)
        assert out["refused_at_admission"] == 1 and out["group_policy"] is None
        assert out["happened"]["wait_s"]["p99"] == 80.0 and out["would_have"]["wait_s"]["p99"] == 0
        table = _cli(*args)
        assert table.exit_code == 0, table.output
        assert "happened (the scheduler's)" in table.stdout and "under pack" in table.stdout
        assert _cli(*args[:-1], "first-fit").exit_code == 2
        assert _cli(*args, "--since", "yesterday").exit_code == 2
        assert anyio.run(last) == before


async def _plain_user(c: Secured, name: str) -> tuple[str, str]:
    """A user of the default project with a keypair of its own, applied onto the
    tenancy ledger as the registrar would; its key and secret."""
    key, secret = new_access_key(), new_secret()
    for command in (
        CreateUser(user=name, domain="default", projects=("default",)),
        CreateKeypair(access_key=key, user=name, secret_hash=hash_secret(secret)),
    ):
        prov = Provenance("system", SystemClock().now())
        await c.setup.append(
            subj.TENANCY, stamp(AdminApplied, prov, requester="system", command=command)
        )
    return key, secret


@pytest.mark.anyio
async def test_only_an_identity_that_reads_the_log_may_run_whatif(tmp_path: Path) -> None:
    async with secured_cluster(services=("api",)) as c:
        key, secret = await _plain_user(c, "ana")
        seq = await c.setup.last_seq()
        args = ["--nats", c.url, "--access-key", key, "sim", "whatif"]
        args += ["--group", "default", "--policy", "pack", "--json"]
        env = {"FGPU_SECRET_KEY": secret}
        refused = await anyio.to_thread.run_sync(lambda: _cli(*args, env=env))
        assert refused.exit_code == 1
        assert "only the cluster's services may" in refused.stderr
        assert "permissions violation" in refused.stderr.lower()
        # The services' keypair of the api reads it (as projections rebuild does).
        api_key, api_secret = c.services["api"]
        keys = tmp_path / "services.json"
        keys.write_text(json.dumps({"api": {"access_key": api_key, "secret": api_secret}}))
        allowed = await anyio.to_thread.run_sync(
            lambda: _cli("--service-keys", str(keys), *args, env=env)
        )
        assert allowed.exit_code == 0, allowed.output
        assert json.loads(allowed.stdout)["group"] == "default"
        assert "no agent registered in resource group default" in allowed.stderr
        assert await c.stored_since(seq) == []  # the access audit aside: nothing
