"""``fgpu sim replay --timed``: tasks arrive and leave on a virtual clock through the
scheduler's fold and decide; a small trace whose waits and allocation are worked out by
hand: what does not fit waits in the queue until what holds the device leaves."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events import AgentRegistered
from services.cli.main import app
from services.domain.trace import TraceError, parse_nodes, parse_tasks, parse_timings
from services.sim.replay import agent_configs, registration, request_of
from services.sim.timed import Arrival, Outcome, replay_timed

# One node of one GPU. a holds it whole from 0 to 100; b (0.6) and c (0.4) come at 10 and
# 20 and wait for it: both are placed together when a leaves at 100 (b waited 90, c 80);
# c leaves at 110, b at 140; d, CPU only, comes at 5 and is placed at once; e, a whole
# GPU at 150, finds it free. f, 8 GPUs, can never fit: rejected.
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,65536,1,T4\n"
COLUMNS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
PODS = f"""{COLUMNS}creation_time,deletion_time,scheduled_time
a,1000,1024,1,1000,,LS,Running,0,100,0
b,1000,1024,1,600,,LS,Running,10,50,10
c,1000,1024,1,400,,LS,Running,20,35,25
d,1000,1024,0,0,,LS,Running,5,15,5
e,1000,1024,1,1000,,LS,Running,150,200,150
f,1000,1024,8,1000,,LS,Pending,160,170,
"""


def _arrivals(withdraw: dict[str, float] | None = None) -> list[Arrival]:
    tasks, timings = parse_tasks(PODS), parse_timings(PODS)
    return [
        Arrival(request_of(i, t), w.arrival_s, w.duration_s, (withdraw or {}).get(t.name))
        for i, (t, w) in enumerate(zip(tasks, timings, strict=True))
    ]


def _agents() -> list[AgentRegistered]:
    return [registration(c) for c in agent_configs(parse_nodes(NODES))]


def test_the_trace_gives_each_task_its_times() -> None:
    timings = parse_timings(PODS)
    assert [(w.arrival_s, w.duration_s, w.waited_s) for w in timings[1:3]] == [
        (10, 40, 0),
        (20, 10, 5),
    ]
    assert timings[-1].waited_s is None and timings[-1].duration_s == 10  # never scheduled
    with pytest.raises(TraceError, match="no column creation_time"):
        parse_timings("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1\n")
    with pytest.raises(TraceError, match="line 2: times must run"):
        parse_timings("creation_time,deletion_time,scheduled_time\n10,5,\n")


@pytest.mark.parametrize("policy", ["best-fit", "fragmentation-aware", "round-robin"])
def test_what_does_not_fit_waits_until_what_holds_the_device_leaves(policy: str) -> None:
    run = replay_timed(_agents(), _arrivals(), policy)
    assert run.outcomes == [
        Outcome("placed", 0.0),
        Outcome("placed", 90.0),
        Outcome("placed", 80.0),
        Outcome("placed", 0.0),
        Outcome("placed", 0.0),
        Outcome("rejected", None),
    ]
    assert run.capacity == 1000
    assert run.allocated == [(0, 1000), (110, 600), (140, 0), (150, 1000), (200, 0)]
    summary = run.summary(span_s=200, samples=4)
    assert summary["wait_s"] == {"p50": 0.0, "p99": 90.0, "mean": 34.0}
    assert (summary["placed"], summary["rejected"], summary["waiting"]) == (5, 1, 0)
    # (110 s at 1000 + 30 s at 600 + 50 s at 1000) / 200 s, of 1000
    assert summary["utilisation_pct"]["mean"] == 89.0
    assert summary["utilisation_pct"]["curve"] == [
        [0.0, 100.0],
        [50.0, 100.0],
        [100.0, 100.0],
        [150.0, 100.0],
        [200.0, 0.0],
    ]


def test_a_pending_timeout_cancels_the_waiting_when_it_falls_due() -> None:
    # b would wait 90 s and c 80 s: with 50 s, both are cancelled (at 60 and 70), and the
    # device stays free from 100 until e comes.
    run = replay_timed(_agents(), _arrivals(), "best-fit", pending_timeout_s=50)
    assert [o.status for o in run.outcomes] == [
        "placed",
        "cancelled",
        "cancelled",
        "placed",
        "placed",
        "rejected",
    ]
    assert run.allocated == [(0, 1000), (100, 0), (150, 1000), (200, 0)]


def test_an_owner_who_gives_up_while_waiting_is_cancelled_then() -> None:
    run = replay_timed(_agents(), _arrivals({"b": 60.0, "a": 50.0}), "best-fit")
    # a was running at 50: giving up on a wait it no longer has changes nothing.
    assert run.outcomes[0] == Outcome("placed", 0.0)
    assert run.outcomes[1] == Outcome("cancelled", None)
    assert run.outcomes[2] == Outcome("placed", 80.0)
    assert run.allocated[:2] == [(0, 1000), (100, 400)]


def test_sim_replay_timed_prints_each_policy(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    args = ["sim", "replay", "--timed", "--nodes", str(tmp_path / "nodes.csv")]
    args += ["--pods", str(tmp_path / "pods.csv"), "--samples", "4"]
    result = CliRunner().invoke(app, [*args, "--policy", "pack,spread", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out["policies"]) == {"pack", "spread"}
    assert out["span_s"] == 160 and out["gpus"] == 1 and out["tasks"] == 6  # f's arrival
    assert out["recorded_wait_s"] == {"p50": 0, "p99": 5}
    for summary in out["policies"].values():
        assert summary["wait_s"]["p99"] == 90.0
        assert len(summary["utilisation_pct"]["curve"]) == 5
    # Twice the load: the same tasks coming in half the time, running as long.
    doubled = CliRunner().invoke(app, [*args, "--load", "2", "--json"])
    assert json.loads(doubled.stdout)["span_s"] == 80
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "wait p99 (s)" in table.stdout and "90" in table.stdout


def test_sim_replay_timed_needs_the_times(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1\n")
    args = ["sim", "replay", "--nodes", str(tmp_path / "nodes.csv")]
    args += ["--pods", str(tmp_path / "pods.csv")]
    refused = CliRunner().invoke(app, [*args, "--timed"])
    assert refused.exit_code == 2 and "no column creation_time" in refused.stderr
    assert CliRunner().invoke(app, [*args, "--load", "2"]).exit_code == 2
