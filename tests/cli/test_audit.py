"""``fgpu audit`` (through the read API) and ``fgpu projections rebuild`` (from the log),
on a real log of the README scenario."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from projections import ProjectionStore
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.cli.main import app
from tests.support.api_stack import read_api
from tests.support.nats_env import fresh_stream
from tests.support.scenario import Scenario, log_records, run_scenario

Audited = tuple[str, str, Scenario, list[str]]  # NATS URL, API URL, the scenario, times


async def _scenario(url: str) -> tuple[Scenario, list[str]]:
    log = await connect(url)
    try:
        await fresh_stream(log)
        sc = await run_scenario(log)
        records = await log_records(log)
    finally:
        await log.close()
    times = [r.event.at.isoformat() for r in records]  # type: ignore[union-attr]
    return sc, times


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audited]:
    with nats_server.nats_server() as server:
        sc, times = anyio.run(_scenario, server.url, backend="asyncio")
        db = tmp_path_factory.mktemp("audit") / "p.duckdb"
        with read_api(server.url, db) as api:
            yield server.url, api.url, sc, times


def _run(scenario: Audited, *args: str) -> tuple[int, str]:
    url, api, _, _ = scenario
    result = CliRunner().invoke(app, ["--nats", url, "--api", api, *args])
    return result.exit_code, result.output


def test_a_session_s_story_in_the_terminal(scenario: Audited) -> None:
    _, _, sc, _ = scenario
    code, out = _run(scenario, "audit", "session", sc.waited)
    assert code == 0, out
    waiting = sc.final.sessions[sc.waited].waiting
    assert f"{sc.waited} of alice: RUNNING" in out
    assert "alice asked for 1 fGPU" in out and f"it waits: {waiting}" in out
    assert "placed on a1 (gpu0 1 fGPU) after waiting" in out and "running on a1" in out
    code, out = _run(scenario, "audit", "session", sc.victim, "--json")
    body = json.loads(out)
    assert body == _get(scenario, f"/v1/sessions/{sc.victim}/history")  # the API's JSON
    assert body["session"]["status"] == "TERMINATED"
    assert body["summary"].startswith("ended with exit code")
    texts = [line["text"] for line in body["story"]]
    assert "alice asked to destroy it" in texts
    code, out = _run(scenario, "audit", "session", "nope")
    assert code == 1 and "no session 'nope'" in out
    code, out = _run(scenario, "audit", "session", "no/pe")
    assert code == 2 and "is not a session id" in out


def test_the_cluster_at_a_past_instant(scenario: Audited) -> None:
    _, _, sc, times = scenario
    then = sc.busy_seq
    code, out = _run(scenario, "audit", "--seq", str(then), "--json")
    assert code == 0, out
    past = json.loads(out)
    assert past == _get(scenario, f"/v1/state?seq={then}")  # the API's JSON
    assert past["seq"] == then and past["counts"] == {"PENDING": 1, "RUNNING": 2}
    shares = past["agents"][0]["gpus"][0]["shares"]
    assert {sh["session"] for sh in shares} == {i for i in sc.ids if i != sc.waited}
    # The same instant by time: the state after the last event stamped at or before it.
    code, out = _run(scenario, "audit", "--at", times[then - 1], "--json")
    by_time = json.loads(out)
    assert by_time["seq"] >= then and times[by_time["seq"] - 1] == times[then - 1]
    code, out = _run(scenario, "audit", "--at", times[then - 1])
    assert code == 0 and "The cluster after event" in out and "fGPU shares" in out
    code, out = _run(scenario, "audit", "--at", "2000-01-01T00:00:00Z", "--json")
    assert json.loads(out)["seq"] == 0
    for bad in (["--at", "noon"], [], ["--at", "now", "--seq", "3"]):
        code, out = _run(scenario, "audit", *bad)
        assert code == 2 and "error" in out, (bad, out)


def test_projections_rebuild(scenario: Audited, tmp_path: Path) -> None:
    _, _, sc, times = scenario
    db = tmp_path / "p.duckdb"
    code, out = _run(scenario, "projections", "rebuild", "--db", str(db))
    assert code == 0 and f"{len(times)} events" in out, out
    store = ProjectionStore(db)
    try:
        found = dict(store.con.execute("SELECT session_id, status FROM sessions").fetchall())
    finally:
        store.close()
    assert found == {i: v.status.value for i, v in sc.final.sessions.items()}
    # While another process holds the file, a rebuild is refused (it would be lost).
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,sys; c=duckdb.connect({str(db)!r}); "
            "print('open', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        code, out = _run(scenario, "projections", "rebuild", "--db", str(db))
        assert code == 1 and "stop `fgpu up` first" in out, out
    finally:
        holder.communicate("", timeout=30)


def test_rebuild_defaults_to_the_file_fgpu_up_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fgpu up` keeps its projections beside its log; `fgpu projections rebuild` must
    find that file, not one of its own beside the state file."""
    from services.cli.log_cmd import _default_db
    from services.cli.options import state_file
    from services.cli.stack import StackInfo

    monkeypatch.setenv("FGPU_HOME", str(tmp_path / "home"))
    assert _default_db() == tmp_path / "home" / "projections.duckdb"  # no stack running
    StackInfo("nats://127.0.0.1:4222", str(tmp_path / "log"), None, 1).save()
    assert state_file().exists()
    assert _default_db() == tmp_path / "log" / "projections.duckdb"


def _get(scenario: Audited, path: str) -> object:
    from services.cli.api_client import ReadApi

    return ReadApi(scenario[1]).get(path)
