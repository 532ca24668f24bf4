"""``fgpu sim replay``: a trace replayed through the scheduler gives the same placements
the fast way (fold and ``decide`` in this process), through the real actors on the
in-memory log, and through them on a real nats-server with dummy-runtime agents; the
protocol's figures; the CLI's JSON."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.memory_log import MemoryLog
from services.cli.main import app
from services.domain.scheduling.placement import POLICY_NAMES
from services.domain.trace import (
    FGPU_PER_GPU,
    Task,
    TraceError,
    arrivals,
    capacity,
    outcome,
    parse_nodes,
    parse_tasks,
)
from services.sim.replay import replay, replay_on_log

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,16000,65536,2,P100
n1,32000,131072,4,V100M16
n2,8000,32768,1,T4
n3,96000,393216,8,G2
n4,64000,262144,2,P100
"""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos
p0,4000,8192,1,500,,LS
p1,8000,16384,1,1000,,LS
p2,2000,4096,0,0,,BE
p3,6000,12288,1,250,V100M16|T4,LS
p4,16000,65536,4,1000,,LS
p5,1000,0,1,810,,LS
p6,12000,24576,2,1000,G2,LS
p7,3000,6144,1,470,P100,LS
p8,24000,49152,1,320,,BE
p9,2000,4096,1,160,T4,LS
"""


def _trace() -> tuple[list, list[Task]]:
    nodes = parse_nodes(NODES)
    return nodes, arrivals(parse_tasks(PODS), nodes, seed=42)


def test_the_trace_reads_as_the_protocol_says() -> None:
    nodes = parse_nodes(NODES)
    tasks = parse_tasks(PODS)
    assert capacity(nodes) == 17 * FGPU_PER_GPU
    by_name = {t.name: t for t in tasks}
    assert by_name["p4"].fgpu == 4 * FGPU_PER_GPU  # four whole GPUs
    assert by_name["p2"].fgpu == 0  # CPU only
    assert by_name["p3"].gpu_models == ("V100M16", "T4")
    assert by_name["p5"].mem == 1  # no memory asked: the least there is
    arrived = arrivals(tasks, nodes, seed=42)
    asked = sum(t.fgpu for t in arrived)
    assert asked * 10 <= capacity(nodes) * 13 < (asked + max(t.fgpu for t in tasks)) * 10
    assert arrived[: len(tasks)] != tasks and sorted(arrived[: len(tasks)]) == sorted(tasks)
    assert arrivals(tasks, nodes, seed=42) == arrived


def test_a_bad_trace_names_its_line() -> None:
    with pytest.raises(TraceError, match="line 2: gpu is not an integer"):
        parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,x,T4\n")
    with pytest.raises(TraceError, match="no column num_gpu"):
        parse_tasks("name,cpu_milli,memory_mib,gpu_milli\np,1,1,1\n")


def test_unallocated_is_read_when_arrived_first_reaches_each_level() -> None:
    task = Task("t", 1, 1, 500, ())
    result = outcome([task] * 6, [True, True, False, True, False, False], cap=2000)
    # arrived 25, 50, 75, 100, 125, 150 %: held 500, 1000, 1000, 1500, 1500, 1500
    assert result.unallocated_gpu_pct == {"90": 25.0, "100": 25.0, "130": 25.0}
    assert result.curve[:3] == [(25, 75.0), (50, 50.0), (75, 50.0)]


@pytest.mark.anyio
async def test_the_fast_replay_places_as_the_actors_do_on_the_memory_log() -> None:
    nodes, arrived = _trace()
    for name in POLICY_NAMES:
        fast = replay(nodes, arrived, name)
        assert any(p is None for p in fast) and any(p is not None for p in fast)
        assert await replay_on_log(MemoryLog(), nodes, arrived, name) == fast, name


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["fragmentation-aware", "round-robin"])
async def test_a_real_nats_server_gives_the_same_placements(log: JetStreamLog, name: str) -> None:
    nodes, arrived = _trace()
    on_nats = await replay_on_log(log, nodes, arrived, name, runtime=DummyRuntime)
    assert on_nats == replay(nodes, arrived, name)


def test_sim_replay_prints_the_figures_as_json(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    args = ["sim", "replay", "--nodes", str(tmp_path / "nodes.csv")]
    args += ["--pods", str(tmp_path / "pods.csv"), "--seed", "7"]
    result = CliRunner().invoke(app, [*args, "--policy", "pack", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out["unallocated_gpu_pct"]) == {"90", "100", "130"}
    assert all(0 <= v <= 100 for v in out["unallocated_gpu_pct"].values())
    assert out["policy"] == "pack" and out["seed"] == 7 and out["gpus"] == 17
    levels = [level for level, _ in out["curve"]]
    assert levels == sorted(set(levels)) and levels[-1] <= 130
    bad = CliRunner().invoke(app, [*args, "--policy", "first-fit"])
    assert bad.exit_code == 2 and "fragmentation-aware" in bad.stderr
