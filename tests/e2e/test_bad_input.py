"""Bad input gets a clear error and a rejection event; no actor crashes, nothing is lost."""

import json
import subprocess
from datetime import UTC, datetime

import anyio
import msgspec
import pytest

from events import PayloadRejected, SessionRequested, Slots
from events import subjects as subj
from services.actors.common import new_id
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from tests.support.cli_stack import FGPU
from tests.support.cluster import GIB, agent_config, running_cluster

IMAGE = "fgpu/busybox:latest"
ONE = Slots(cpu=1000, mem=GIB, fgpu=100)


def _request(owner: str, sid: str, **changes: object) -> SessionRequested:
    fields: dict[str, object] = {
        "id": new_id(),
        "at": datetime.now(UTC),
        "actor": owner,
        "session_id": sid,
        "owner": owner,
        "image": IMAGE,
        "slots": ONE,
    }
    fields.update(changes)
    return SessionRequested(**fields)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_bad_input_is_rejected_with_a_reason_and_the_cluster_keeps_working(
    log: JetStreamLog,
) -> None:
    alice = Client(log, SystemClock(), "alice")
    bob = Client(log, SystemClock(), "bob")
    async with running_cluster(log, [(agent_config("a1", gpus=2), DummyRuntime())]):
        # Payloads published straight onto the stream, bypassing every client check.
        raw = {
            "garbage": (subj.request("alice", "sgarbage"), b"{not json"),
            "unknown-field": (
                subj.request("alice", "sunknown"),
                msgspec.json.encode({**msgspec.to_builtins(_request("alice", "sunknown")), "x": 1}),
            ),
            "float-fgpu": (
                subj.request("alice", "sfloat"),
                json.dumps(
                    {**msgspec.to_builtins(_request("alice", "sfloat")), "slots": {"fgpu": 0.5}}
                ).encode(),
            ),
            "other-key": (
                subj.request("mallory", "sspoof"),
                msgspec.json.encode(_request("alice", "sspoof")),
            ),
            # An amount no 64-bit column holds: no event at all, never a crashed reader.
            "overflow": (
                subj.request("alice", "soverflow"),
                json.dumps(
                    {
                        **msgspec.to_builtins(_request("alice", "soverflow")),
                        "slots": {"cpu": 10**21, "mem": GIB, "fgpu": 100},
                    }
                ).encode(),
            ),
        }
        for subject, payload in raw.values():
            await log.nc.publish(subject, payload)
        await log.nc.flush()
        # Decodable but invalid requests.
        for sid, changes in {
            "szero": {"slots": Slots(cpu=1000, mem=GIB, fgpu=0)},
            "sneg": {"slots": Slots(cpu=1000, mem=GIB, fgpu=-50)},
            "sprio": {"priority": 1000},
            "simage": {"image": "Not An Image!"},
            "sunknownimage": {"image": "nobody/has-this:1"},
            "shuge": {"slots": Slots(cpu=1000, mem=GIB, fgpu=500)},  # cluster has 4 fGPU
            "smem": {"slots": Slots(cpu=1000, mem=10_000 * GIB, fgpu=100)},
            "sabsurd": {"slots": Slots(cpu=1 << 60, mem=GIB, fgpu=100)},
        }.items():
            await log.append(subj.request("alice", sid), _request("alice", sid, **changes))
        good = await alice.create(image=IMAGE, slots=ONE)
        d_unknown = await alice.destroy("snosuchsession")
        d_other = await bob.destroy(good[0])

        def done(s: ClusterState) -> bool:
            return (
                not s.malformed
                and len(s.destroy_answers) == 2
                and good[0] in s.sessions
                and s.sessions[good[0]].status == "RUNNING"
                and all(
                    s.sessions[i].status == "REJECTED"
                    for i in ("szero", "shuge", "smem", "sabsurd")
                )
            )

        with anyio.fail_after(20):
            s = await alice.wait_until(done)

    rejected = {sid: (v.status.value, v.reason or "") for sid, v in s.sessions.items()}
    assert rejected["szero"] == ("REJECTED", "fGPU must be greater than zero")
    assert rejected["sneg"] == ("REJECTED", "fGPU must be greater than zero")
    assert "priority must be between 0 and 100" in rejected["sprio"][1]
    assert "not a valid image reference" in rejected["simage"][1]
    assert "'nobody/has-this:1' is not available on any agent" in rejected["sunknownimage"][1]
    assert "no agent can ever hold 5 fGPU" in rejected["shuge"][1]
    assert (
        "no agent can ever hold 1 fGPU, 1 cpu, 9.77T mem; "
        "the largest offers 4 fGPU, 64 cpu, 256G mem" in rejected["smem"][1]
    )
    assert rejected["sabsurd"] == ("REJECTED", "a requested amount is more than any cluster holds")
    assert s.destroy_answers[d_unknown] == "no such session"
    assert s.destroy_answers[d_other] == "the session belongs to another access key"
    assert s.sessions[good[0]].status == "RUNNING"  # bob's destroy changed nothing

    # Every refused payload has its PayloadRejected, naming its sequence and why.
    answers: dict[str, PayloadRejected] = {}
    async for batch in log.read(0):
        for r in batch:
            if isinstance(r.event, PayloadRejected):
                answers[r.event.subject] = r.event
    assert set(answers) == {subject for subject, _ in raw.values()}
    assert "unknown field `x`" in answers[raw["unknown-field"][0]].error
    assert "Expected `int`, got `float`" in answers[raw["float-fgpu"][0]].error
    assert "on subject fgpu.req.mallory.sspoof" in answers[raw["other-key"][0]].error
    assert "Expected `int` <= 4611686018427387904" in answers[raw["overflow"][0]].error
    for name in ("sgarbage", "sunknown", "sfloat", "sspoof", "soverflow"):
        assert name not in s.sessions


@pytest.mark.anyio
async def test_policy_limits_concurrent_sessions_and_total_fgpu(log: JetStreamLog) -> None:
    admin = Client(log, SystemClock(), "admin")
    carol = Client(log, SystemClock(), "carol")
    await admin.set_policy(
        "carol", max_sessions=2, max_slots=Slots(cpu=99_000, mem=99 * GIB, fgpu=150)
    )
    async with running_cluster(log, [(agent_config("a1", gpus=2), DummyRuntime())]):
        ids = await carol.create(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=100))
        ids += await carol.create(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=100))
        ids += await carol.create(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=25))
        ids += await carol.create(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=25))
        ids += await carol.create(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=25))
        with anyio.fail_after(20):
            s = await carol.wait_until(
                lambda s: all(
                    i in s.sessions and s.sessions[i].status in ("RUNNING", "REJECTED") for i in ids
                )
            )
    statuses = [s.sessions[i].status.value for i in ids]
    assert statuses == ["RUNNING", "REJECTED", "RUNNING", "REJECTED", "REJECTED"]
    assert "policy allows 1.5 fGPU" in (s.sessions[ids[1]].reason or "")
    assert "policy allows 2 concurrent sessions" in (s.sessions[ids[3]].reason or "")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "fGPU must be greater than zero"),
        ("-1", "fGPU must be greater than zero"),
        ("nan", "fGPU must be a finite number"),
        ("0.001", "fGPU must be a multiple of 0.01"),
        ("lots", "fGPU must be a number"),
    ],
)
def test_cli_refuses_bad_fgpu_before_anything_is_published(value: str, message: str) -> None:
    p = subprocess.run(
        [
            FGPU,
            "--nats",
            "nats://127.0.0.1:9",
            "session",
            "create",
            "--image",
            IMAGE,
            "--fgpu",
            value,
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2
    assert message in p.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give --fgpu (the fGPU to hold), or --cpu-only"),
        (("--cpu-only", "--fgpu", "0.5"), "--cpu-only asks for no GPU: give no --fgpu"),
        (("--cpu-only", "--gpu-model", "H100"), "--cpu-only asks for no GPU: give no --gpu-model"),
        (
            ("--fgpu", "1", "--gpu-model", ",".join(f"M{i}" for i in range(65))),
            "gpu_models must be at most 64 names",
        ),
        (("--fgpu", "1", "--type", "batch"), "a batch session runs a command: give one"),
        (("--fgpu", "1", "--type", "service"), "--type is batch or interactive"),
        (("--fgpu", "1", "--group", "no/slash"), "group 'no/slash' must be 1-64 letters"),
    ],
)
def test_cli_refuses_a_gpu_shape_that_cannot_be(args: tuple[str, ...], message: str) -> None:
    p = subprocess.run(
        [FGPU, "--nats", "nats://127.0.0.1:9", "session", "create", "--image", IMAGE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2, p.stderr
    assert message in p.stderr
