"""``fgpu pipeline ...`` against a real server, the actors (the pipeline actor among them)
with a dummy agent, and the read API: validate, run, info, ls, cancel, rerun."""

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal
from typer.testing import CliRunner

from services.actors.pipeline import PipelineActor
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.cli.api_client import ReadApi
from services.cli.main import app
from tests.support.api_stack import read_api
from tests.support.cluster import agent_config, running_cluster

DOC = """
name: demo
tasks:
  - name: prepare
    image: fgpu/busybox:latest
    command: echo prepared
    resources: {cpu: "0.1", mem: 64m}
  - name: train
    image: fgpu/busybox:latest
    command: [sh, -c, "sleep 0.2"]
    resources: {fgpu: "0.5", cpu: "0.1", mem: 64m}
    dependencies: [prepare]
"""


async def _actors(url: str, *, task_status: TaskStatus[None]) -> None:
    events = await connect(url, name="test-pipeline-cli")
    try:
        await events.create_or_update_stream()
        agents = [(agent_config("a1"), DummyRuntime())]
        async with running_cluster(events, agents), anyio.create_task_group() as tg:
            await tg.start(PipelineActor(events, SystemClock()).run)
            task_status.started()
            await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await events.close()


class Cli:
    def __init__(self, nats: str, api: str) -> None:
        self.nats, self.api = nats, api

    def run(self, *args: str, key: str = "alice") -> Any:
        given = ["--nats", self.nats, "--api", self.api, "--access-key", key, *args]
        return CliRunner().invoke(app, given)

    def json(self, *args: str, key: str = "alice") -> Any:
        result = self.run(*args, "--json", key=key)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def until_ended(self, run_id: str, round_: int = 0) -> dict[str, Any]:
        """The run once ended (in round ``round_``), looked at again after each event
        the API's stream brings."""
        api = ReadApi(self.api)
        for _ in api.stream(0, deadline=time.monotonic() + 60):
            shown: dict[str, Any] = api.get(f"/v1/pipelines/{run_id}")
            if shown["round"] == round_ and shown["status"] not in ("running", "cancelling"):
                return shown
        raise AssertionError(f"run {run_id} did not end in time")


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    db = tmp_path_factory.mktemp("pipeline-cli") / "p.duckdb"
    with nats_server.nats_server() as server, start_blocking_portal("asyncio") as portal:
        running, _ = portal.start_task(_actors, server.url)
        try:
            with read_api(server.url, db) as api:
                yield Cli(server.url, api.url)
        finally:
            running.cancel()


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(DOC)
    return path


def test_validate_says_every_problem_one_a_line(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DOC.replace("[prepare]", "[prepare, nowhere]").replace("name: demo", "name: d"))
    result = cli.run("pipeline", "validate", str(bad))
    assert result.exit_code == 2
    assert result.stderr == "error: tasks.train.dependencies: no task is called 'nowhere'\n"
    missing = cli.run("pipeline", "validate", str(tmp_path / "none.yaml"))
    assert missing.exit_code == 2 and missing.stderr.startswith("error: ")
    assert missing.stderr.count("\n") == 1


def test_validate_checks_each_task_against_the_users_rights_through_the_api(
    cli: Cli, tmp_path: Path
) -> None:
    """A task more than any agent of its group holds: one line, as the read API's limits
    of the user say it (the file alone is valid)."""
    big = tmp_path / "big.yaml"
    big.write_text(DOC.replace('{fgpu: "0.5", cpu: "0.1", mem: 64m}', "{cpu: 1, mem: 512g}"))
    result = cli.run("pipeline", "validate", str(big))
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: tasks.train.resources: none of the 1 agents of resource group default holds"
    )


def test_run_then_info_shows_the_dag_with_each_tasks_state(cli: Cli, doc: Path) -> None:
    assert cli.json("pipeline", "validate", str(doc))["tasks"] == ["prepare", "train"]
    run_id = cli.json("pipeline", "run", str(doc), "--request-id", "r-run-1")["run_id"]
    again = cli.json("pipeline", "run", str(doc), "--request-id", "r-run-1")["run_id"]
    assert again == run_id  # the same request: the same run, once
    shown = cli.until_ended(run_id)
    assert shown["status"] == "succeeded"
    assert [(t["name"], t["status"], t["session_status"]) for t in shown["tasks"]] == [
        ("prepare", "succeeded", "TERMINATED"),
        ("train", "succeeded", "TERMINATED"),
    ]
    assert shown == cli.json("pipeline", "info", run_id)  # the API's own shape
    text = cli.run("pipeline", "info", run_id).stdout
    assert "train <- prepare" in text.replace("succeeded", "").replace("  ", " ")
    assert run_id in [r["run_id"] for r in cli.json("pipeline", "ls")["runs"]]
    before = {t["name"]: t["session_id"] for t in shown["tasks"]}
    rerun = cli.run("pipeline", "rerun", run_id, "--from", "train")
    assert rerun.exit_code == 0, rerun.output
    after = cli.until_ended(run_id, 1)
    assert after["status"] == "succeeded"
    sessions = {t["name"]: t["session_id"] for t in after["tasks"]}
    assert sessions["prepare"] == before["prepare"]  # kept its outcome
    assert sessions["train"] != before["train"]  # ran again, in a session of its own


def test_cancel_of_a_running_run(cli: Cli, tmp_path: Path) -> None:
    long = tmp_path / "long.yaml"
    long.write_text(DOC.replace('"sleep 0.2"', '"sleep 600"'))
    run_id = cli.json("pipeline", "run", str(long))["run_id"]
    bob = cli.run("pipeline", "cancel", run_id, key="bob")
    assert bob.exit_code == 0  # asked; the actor refuses it: not bob's run
    assert cli.run("pipeline", "cancel", run_id).exit_code == 0
    shown = cli.until_ended(run_id)
    assert shown["status"] == "cancelled"


def test_a_bad_run_id_is_one_line(cli: Cli) -> None:
    result = cli.run("pipeline", "info", "no such run")
    assert result.exit_code == 2 and result.stderr == "error: 'no such run' is not a run id\n"
    missing = cli.run("pipeline", "info", "pnothere")
    assert missing.exit_code == 1 and "no run pnothere" in missing.stderr


def test_schedule_then_unschedule(cli: Cli, doc: Path) -> None:
    bad = cli.run("pipeline", "schedule", str(doc), "--cron", "soon")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: cron 'soon': five fields")
    made = cli.json("pipeline", "schedule", str(doc), "--cron", "0 3 * * *")
    assert made["schedule_id"].startswith("c") and made["cron"] == "0 3 * * *"
    gone = cli.run("pipeline", "unschedule", made["schedule_id"])
    assert gone.exit_code == 0 and "unscheduled" in gone.stdout
