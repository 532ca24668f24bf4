"""``fgpu audit`` and ``fgpu projections rebuild`` on a real log (the README scenario).

The commands are registered on a bare Typer app here, as ``services/cli/main.py``
registers them on ``fgpu``.
"""

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import typer
from nats_env import fresh_stream
from typer.testing import CliRunner

from projections import ProjectionStore
from services.adapters.jetstream import JetStreamLog, connect
from services.cli import audit_cmd
from services.cli.options import Settings
from tests.test_api import Scenario, log_records, run_scenario


def _app(url: str) -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def main(ctx: typer.Context) -> None:
        ctx.obj = Settings(nats=url, access_key="admin")

    audit_cmd.register(app)
    return app


async def _fresh_scenario(url: str) -> tuple[Scenario, list[str]]:
    log: JetStreamLog = await connect(url)
    try:
        await fresh_stream(log)
        sc = await run_scenario(log)
        records = await log_records(log)
    finally:
        await log.close()
    times = [r.event.at.isoformat() for r in records]  # type: ignore[union-attr]
    return sc, times


@pytest.fixture(scope="module")
def scenario(nats_url: str) -> tuple[str, Scenario, list[str]]:
    sc, times = anyio.run(_fresh_scenario, nats_url, backend="asyncio")
    return nats_url, sc, times


def _run(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(_app(url), list(args))
    return result.exit_code, result.output


def test_a_session_s_story_in_the_terminal(scenario: tuple[str, Scenario, list[str]]) -> None:
    url, sc, _ = scenario
    code, out = _run(url, "audit", "session", sc.waited)
    assert code == 0, out
    waiting = sc.final.sessions[sc.waited].waiting
    assert f"{sc.waited} of alice: RUNNING" in out
    assert "alice asked for 1 fGPU" in out and f"it waits: {waiting}" in out
    assert "placed on a1 (gpu0 1 fGPU) after waiting" in out and "running on a1" in out
    code, out = _run(url, "audit", "session", sc.victim, "--json")
    body = json.loads(out)
    assert body["status"] == "TERMINATED" and body["summary"].startswith("ended with exit code")
    texts = [line["text"] for line in body["story"]]
    assert "alice asked to destroy it" in texts
    code, out = _run(url, "audit", "session", "nope")
    assert code == 2 and "no session 'nope'" in out


def test_the_cluster_at_a_past_instant(scenario: tuple[str, Scenario, list[str]]) -> None:
    url, sc, times = scenario
    then = sc.busy_seq
    code, out = _run(url, "audit", "--seq", str(then), "--json")
    assert code == 0, out
    past = json.loads(out)
    assert past["seq"] == then and past["counts"] == {"PENDING": 1, "RUNNING": 2}
    shares = past["agents"][0]["gpus"][0]["shares"]
    assert set(shares) == {i for i in sc.ids if i != sc.waited}
    # The same instant by time: the state after the last event stamped at or before it.
    code, out = _run(url, "audit", "--at", times[then - 1], "--json")
    by_time = json.loads(out)
    assert by_time["seq"] >= then and times[by_time["seq"] - 1] == times[then - 1]
    code, out = _run(url, "audit", "--at", times[then - 1])
    assert code == 0 and "The cluster after event" in out and "fGPU shares" in out
    code, out = _run(url, "audit", "--at", "2000-01-01T00:00:00Z", "--json")
    assert json.loads(out)["seq"] == 0
    for bad in (["--at", "noon"], [], ["--at", "now", "--seq", "3"]):
        code, out = _run(url, "audit", *bad)
        assert code == 2 and "error" in out, (bad, out)


def test_projections_rebuild(scenario: tuple[str, Scenario, list[str]], tmp_path: Path) -> None:
    url, sc, times = scenario
    db = tmp_path / "p.duckdb"
    code, out = _run(url, "projections", "rebuild", "--db", str(db))
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
        code, out = _run(url, "projections", "rebuild", "--db", str(db))
        assert code == 2 and "stop `fgpu up` first" in out, out
    finally:
        holder.communicate("", timeout=30)


def test_rebuild_defaults_to_the_file_fgpu_up_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fgpu up` keeps its projections beside its log; `fgpu projections rebuild` must
    find that file, not one of its own beside the state file."""
    from services.cli.stack import StackInfo, projections_db, state_file

    monkeypatch.setenv("FGPU_HOME", str(tmp_path / "home"))
    assert projections_db() == tmp_path / "home" / "projections.duckdb"  # no stack running
    StackInfo("nats://127.0.0.1:4222", str(tmp_path / "log"), None, 1).save()
    assert state_file().exists()
    assert projections_db() == tmp_path / "log" / "projections.duckdb"
