"""The ``fgpu`` command's own promises: reads go through the read API and print its JSON,
waits follow its event stream, bad input is refused before anything is published, and
a call imports nothing it does not use."""

import dataclasses
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import anyio
import pytest
import typer
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal
from typer.testing import CliRunner

from events import AnyEvent, Slots
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.cli.api_client import ReadApi, StreamEvent
from services.cli.daemon_cmd import AgentOptions
from services.cli.main import app
from services.cli.session_cmd import _ended
from services.cli.watch import wait_for
from services.client import Client
from tests.support.api_stack import read_api
from tests.support.cluster import agent_config, running_cluster

IMAGE = "fgpu/busybox:latest"
DEAD_NATS = "nats://127.0.0.1:9"  # nothing listens there: a command that publishes fails


@dataclass(frozen=True)
class Cluster:
    nats: str
    api: str

    def run(self, *args: str, key: str = "alice", nats: str | None = None) -> Any:
        """``fgpu ARGS`` in this process; the result (exit_code, stdout, stderr)."""
        given = ["--nats", nats or self.nats, "--api", self.api, "--access-key", key, *args]
        return CliRunner().invoke(app, given)

    def json(self, *args: str, key: str = "alice") -> Any:
        result = self.run(*args, "--json", key=key)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return ReadApi(self.api).get(path, params)


async def _actors(url: str, *, task_status: TaskStatus[None]) -> None:
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
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A NATS server of its own, a cluster whose agent registered long before any
    ``fgpu session create`` here, and the read API over it."""
    db = tmp_path_factory.mktemp("cli") / "p.duckdb"
    with nats_server.nats_server() as server, start_blocking_portal("asyncio") as portal:
        running, _ = portal.start_task(_actors, server.url)
        try:
            with read_api(server.url, db) as api:
                yield Cluster(server.url, api.url)
        finally:
            running.cancel()


def _create(cluster: Cluster, key: str, *command: str, wait: bool = True) -> Any:
    args = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--timeout", "30"]
    return cluster.run(*args, *(["--wait"] if wait else []), "--json", "--", *command, key=key)


# ---- writes and waits -----------------------------------------------------------------------


def test_create_wait_sees_a_session_placed_on_an_agent_registered_before(
    cluster: Cluster,
) -> None:
    result = _create(cluster, "alice", "sleep", "infinity")
    assert result.exit_code == 0, result.output
    [session] = json.loads(result.stdout)["sessions"]
    assert session["status"] == "RUNNING" and session["agent"] == "a1"
    assert session == cluster.get(f"/v1/sessions/{session['id']}")  # the API's own shape


def test_create_wait_sees_sessions_that_end_at_once(cluster: Cluster) -> None:
    result = _create(cluster, "alice", "true")
    assert result.exit_code == 0, result.output
    [ran] = json.loads(result.stdout)["sessions"]
    assert ran["status"] in ("RUNNING", "TERMINATED")
    result = _create(cluster, "bob", "true")  # refused by bob's policy at once
    assert result.exit_code == 1, result.output
    [refused] = json.loads(result.stdout)["sessions"]
    assert refused["status"] == "REJECTED" and "policy allows 0" in refused["reason"]


def test_wait_follows_the_stream_until_the_session_ends(cluster: Cluster) -> None:
    """The wait reads the session (RUNNING), opens the stream, and only then is the
    session removed: what ends the wait is the stream's event, not the first read."""
    [session] = json.loads(_create(cluster, "alice", "sleep", "infinity").stdout)["sessions"]
    streaming = threading.Event()

    class Watched(ReadApi):
        def stream(self, after: int, *, deadline: float | None = None) -> Iterator[StreamEvent]:
            streaming.set()
            yield from super().stream(after, deadline=deadline)

    ended: dict[str, Any] = {}

    def wait() -> None:
        ended.update(wait_for(Watched(cluster.api), [session["id"]], _ended, timeout_s=60))

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        assert streaming.wait(60)
        removed = cluster.run("session", "rm", session["id"], "--no-wait")
        assert removed.exit_code == 0, removed.output
    finally:
        waiter.join(60)
    assert ended[session["id"]]["status"] == "TERMINATED"
    assert ended[session["id"]] == cluster.get(f"/v1/sessions/{session['id']}")


def test_wait_for_a_session_nobody_asked_for_times_out(cluster: Cluster) -> None:
    result = cluster.run("session", "wait", "snosuch", "--timeout", "0.5")
    assert result.exit_code == 3 and "within 0.5 s" in result.stderr


def test_rm_reports_refusals_and_waits_for_the_end(cluster: Cluster) -> None:
    [session] = json.loads(_create(cluster, "alice", "sleep", "infinity").stdout)["sessions"]
    refused = cluster.run("session", "rm", session["id"], "--json", key="mallory")
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)[session["id"]] == {
        "result": "refused",
        "reason": "the session belongs to another access key",
    }
    done = cluster.json("session", "rm", session["id"])
    assert done[session["id"]]["result"] == "TERMINATED"


def test_rm_of_one_session_twice_asks_once(cluster: Cluster) -> None:
    [session] = json.loads(_create(cluster, "alice", "sleep", "infinity").stdout)["sessions"]
    done = cluster.run("session", "rm", session["id"], session["id"], "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {session["id"]: {"result": "TERMINATED", "reason": ANY}}


def test_a_wait_through_a_missing_api_publishes_nothing(cluster: Cluster) -> None:
    """create --wait and rm ask the read API before they publish: without it they change
    nothing, rather than make a request they cannot report on."""
    before = _log_end(cluster.nats)
    for args in (
        ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--wait", "--", "true"],
        ["session", "rm", "s0000"],
    ):
        given = ["--nats", cluster.nats, "--api", "http://127.0.0.1:9", *args]
        result = CliRunner().invoke(app, given)
        assert result.exit_code == 1 and "did not answer" in result.stderr, result.output
    assert _log_end(cluster.nats) == before


def _log_end(url: str) -> int:
    """The log's last sequence, read from the server itself."""

    async def read() -> int:
        log = await connect(url, name="test-probe")
        try:
            return await log.last_seq()
        finally:
            await log.close()

    return anyio.run(read, backend="asyncio")


# ---- reads: the API's JSON, one shape, and no NATS needed ----------------------------------


def test_reads_print_the_api_json_and_need_no_nats(cluster: Cluster) -> None:
    [session] = json.loads(_create(cluster, "carol", "sleep", "infinity").stdout)["sessions"]
    sid = session["id"]
    dead = {"nats": DEAD_NATS}
    ls = cluster.run("session", "ls", "--owner", "carol", "--json", **dead)
    assert ls.exit_code == 0, ls.output
    assert json.loads(ls.stdout)["sessions"] == [cluster.get(f"/v1/sessions/{sid}")]
    info = cluster.run("session", "info", sid, "--json", **dead)
    assert json.loads(info.stdout) == cluster.get(f"/v1/sessions/{sid}")
    agents = cluster.run("agents", "ls", "--json", **dead)
    assert json.loads(agents.stdout)["agents"] == cluster.get("/v1/agents")["agents"]
    events = cluster.run("events", "--session", sid, "--json", **dead)
    lines = [json.loads(line) for line in events.stdout.splitlines()]
    api = cluster.get("/v1/events", {"session": sid, "limit": 1000})["events"]
    assert lines == api and lines[0]["type"] == "session.requested.v1"
    human = cluster.run("session", "ls", **dead)
    assert human.exit_code == 0 and sid in human.stdout


def test_events_export_writes_the_range_as_lines_or_a_whole_parquet_file(
    cluster: Cluster, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    every = cluster.get("/v1/events", {"limit": 1000})["events"]
    since = every[len(every) // 2]["at"]
    want = [e["seq"] for e in every if e["at"] >= since]
    lines = cluster.run("events", "export", "--since", since, nats=DEAD_NATS)
    assert lines.exit_code == 0, lines.output
    got = [json.loads(line)["seq"] for line in lines.stdout.splitlines()]
    assert got[: len(want)] == want
    out = tmp_path / "e.parquet"
    done = cluster.run("events", "export", "--format", "parquet", "-o", str(out))
    assert done.exit_code == 0, done.output
    assert pq.read_table(out).column("seq").to_pylist()[: len(every)] == [e["seq"] for e in every]
    assert not (tmp_path / "e.parquet.part").exists()
    bad = cluster.run("events", "export", "--format", "parquet")
    assert bad.exit_code == 2 and "needs --output" in bad.stderr
    assert cluster.run("events", "export", "--since", "yesterday").exit_code == 2


def test_a_missing_session_is_one_line_on_stderr(cluster: Cluster) -> None:
    result = cluster.run("session", "info", "snosuch")
    assert result.exit_code == 1
    assert result.stderr == "error: no session 'snosuch'\n" and result.stdout == ""


def test_no_read_api_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FGPU_HOME", str(tmp_path))
    monkeypatch.delenv("FGPU_API", raising=False)
    result = CliRunner().invoke(app, ["session", "ls"])
    assert result.exit_code == 1
    assert "no read API known" in result.stderr and len(result.stderr.splitlines()) == 1
    result = CliRunner().invoke(app, ["--api", "http://127.0.0.1:9", "session", "ls"])
    assert result.exit_code == 1 and "did not answer" in result.stderr


# ---- bad input, refused at the door -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image", "fgpu/busy box"], "holds white space"),
        (["--image", ""], "the image name is empty"),
        (["--image", "Fgpu/UPPER"], "is not a reference"),
        (["--image", "fgpu//busybox"], "is not a reference"),
        (["--image", "fgpu/busybox:"], "is not a reference"),
        (["--image", "fgpu/busybox@sha256:zz"], "is not a reference"),
        (["--image", "a" * 256], "longer than 255 characters"),
        (["--image", IMAGE, "--name", "n" * 129], "--name must be 1-128 characters"),
        (["--image", IMAGE, "--fgpu", "0.001"], "fGPU must be a multiple of 0.01"),
        (["--image", IMAGE, "--cpu", "999999999999999999"], "cpu is more than any cluster"),
        (["--image", IMAGE, "--", "echo", ""], "the command has an empty element"),
        (["--image", IMAGE, "--", *["x"] * 257], "command is too long"),
    ],
)
def test_bad_input_exits_2_before_anything_is_published(args: list[str], message: str) -> None:
    """``--nats`` points nowhere: a command that got as far as publishing would fail
    with exit 1 instead."""
    given = ["--fgpu", "0.5", *args] if "--fgpu" not in args else args
    if "--" not in given:
        given += ["--", "true"]
    result = CliRunner().invoke(app, ["--nats", DEAD_NATS, "session", "create", *given])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


def test_the_door_checks_the_requests_it_sends() -> None:
    """The door runs the fold's check on the requests as they are sent, mounts among them
    (a 17th folder is refused here, not on the log)."""
    many = [arg for i in range(17) for arg in ("--mount", f"f{i}")]
    args = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", *many, "--", "true"]
    result = CliRunner().invoke(app, ["--nats", DEAD_NATS, *args])
    assert result.exit_code == 2, result.output
    assert "mounts must be at most 16 folder names" in result.stderr


@pytest.mark.parametrize(("fgpu", "code"), [("0", 1), ("0.000", 1), ("00", 1), ("0.01", 2)])
def test_cpu_only_takes_an_fgpu_of_zero_as_a_number(fgpu: str, code: int) -> None:
    """Any zero passes the door (then publishing to no server fails: 1); any other amount
    is refused there (2)."""
    args = ["session", "create", "--image", IMAGE, "--cpu-only", "--fgpu", fgpu, "--", "true"]
    result = CliRunner().invoke(app, ["--nats", DEAD_NATS, *args])
    assert result.exit_code == code, result.output
    assert ("give no --fgpu" in result.stderr) is (code == 2)


def test_the_door_checks_what_the_client_sends() -> None:
    """``session_requests`` (what the door checks) is what ``Client.create`` sends."""
    from services.adapters.memory_log import MemoryLog
    from services.client import session_requests
    from services.domain.request_ids import RequestIds

    class Still:
        def now(self) -> datetime:
            return datetime(2026, 1, 1, tzinfo=UTC)

    async def stored() -> list[AnyEvent]:
        log = MemoryLog()
        client = Client(log, Still(), "alice", secret="s3")
        await client.create(**shape, count=2, request_id="r1")
        return [r.event async for batch in log.read(0) for r in batch]

    shape: dict[str, Any] = {"image": IMAGE, "slots": Slots(cpu=1000, mem=1 << 30, fgpu=50)}
    drafts = session_requests(RequestIds("alice", "r1", "s3"), Still().now(), count=2, **shape)
    assert anyio.run(stored) == drafts


@pytest.mark.parametrize(
    "image",
    [
        "fgpu/busybox",
        "localhost:5000/team/img:v1.2",
        "Registry.Example.com/a/b",
        "[::1]:5000/img",
        f"img@sha256:{'a' * 64}",
        f"img:1@sha512:{'B' * 128}",
    ],
)
def test_the_door_and_the_fold_agree_on_good_references(image: str) -> None:
    """What the CLI lets through is never rejected later as invalid."""
    from services.domain.fold.validation import valid_image
    from services.domain.image_ref import image_reference_problem

    assert image_reference_problem(image) is None
    assert valid_image(image)


def test_no_wait_warns_when_no_alive_agent_offers_the_image(cluster: Cluster) -> None:
    args = ["session", "create", "--image", "nobody/has-this:1", "--fgpu", "0.5", "--", "true"]
    result = cluster.run(*args)
    assert result.exit_code == 0, result.output
    assert "warning: no alive agent offers 'nobody/has-this:1'" in result.stderr
    ok = cluster.run("session", "create", "--image", IMAGE, "--fgpu", "0.5", "--", "true")
    assert ok.exit_code == 0 and ok.stderr == ""


# ---- start-up: a call imports only what it uses -------------------------------------------

_HEAVY = ("fastapi", "duckdb", "pyarrow", "nats", "aiohttp", "pydantic", "uvicorn", "rich")
_PROBE = """
import json, sys
heavy = set(json.loads(sys.argv[2]))
sys.argv = ["fgpu", *json.loads(sys.argv[1])]
from services.cli.main import app
from services.cli.session_cmd import _ended
from services.cli.watch import wait_for
try:
    app()
except SystemExit:
    pass
loaded = sorted({m.split(".")[0] for m in sys.modules} & heavy)
sys.stderr.write("LOADED " + json.dumps(loaded) + "\\n")
"""


def _loaded(*args: str) -> list[str]:
    env = {**os.environ, "FGPU_ACCESS_KEY": "alice"}
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(_HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    line = next(x for x in p.stderr.splitlines() if x.startswith("LOADED "))
    loaded: list[str] = json.loads(line.removeprefix("LOADED "))
    return loaded


def test_a_read_imports_no_nats_duckdb_or_web_framework(cluster: Cluster) -> None:
    assert _loaded("--api", cluster.api, "session", "ls", "--json") == []
    assert _loaded("--api", cluster.api, "agents", "ls", "--json") == []
    assert _loaded("version") == []
    # The tables bring rich, and only rich.
    assert _loaded("--api", cluster.api, "session", "ls") == ["rich"]


# ---- fgpu up, fgpu agent ------------------------------------------------------------------


def _options(command: str) -> set[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    found = group.commands[command]
    return {p.name for p in found.params if isinstance(p, typer.core.TyperOption) and p.name}


def test_up_and_agent_take_every_agent_option() -> None:
    agent_options = {f.name for f in dataclasses.fields(AgentOptions)}
    assert _options("agent") == agent_options
    assert _options("up") == agent_options | {
        "store",
        "ephemeral",
        "port",
        "api_port",
        "apps_port",
        "no_api",
        "storage_uid",
        "lost_grace",
        "retain_events",
        "retain_days",
        "archive_every",
        "snapshot_events",
        "low_space",
        "serve_port",
        "serve_proxy",
        "no_serve",
    }


def test_an_agent_mounts_every_storage_host_unless_told_which(tmp_path: Path) -> None:
    def hosts(**given: Any) -> tuple[str, ...] | None:
        cfg, _ = AgentOptions(mock_gpus=1, no_shim=True, **given).setup()
        assert cfg.vfolder_root is not None
        return cfg.storage_hosts

    assert hosts() is None  # every host's folders under its root
    assert hosts(storage_host=["nfs", "local", "nfs"]) == ("nfs", "local")
    toml = tmp_path / "agent.toml"
    toml.write_text('storage_hosts = ["ceph"]\n')
    assert hosts(config=toml) == ("ceph",)
    assert hosts(config=toml, storage_host=["nfs"]) == ("nfs",)  # the option wins
    toml.write_text("storage_hosts = []\n")
    assert hosts(config=toml) == ()  # none: no session that mounts a folder comes here
    with pytest.raises(SystemExit) as refused:
        hosts(storage_host=["a/b"])
    assert refused.value.code == 2


@pytest.mark.parametrize("command", ["up", "agent"])
def test_a_bad_agent_option_is_a_clear_error(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--mock-gpus", "1", "--gpu-mem", "lots"])
    assert result.exit_code == 2
    assert "lots" in result.stderr


@pytest.mark.parametrize(
    ("command", "kind"),
    [(["scheduler"], "scheduler"), (["quota"], "quota"), (["sim", "agents"], "agent-host")],
)
def test_a_durable_its_keypair_may_not_use_is_refused_at_the_start(
    command: list[str], kind: str
) -> None:
    """A service keypair's permissions name its kind's durables (NAME, NAME-2 .. NAME-4)
    and no other: another is refused before anything connects, saying which may be used."""
    result = CliRunner().invoke(app, ["--nats", DEAD_NATS, *command, "--durable", "mine"])
    assert result.exit_code == 2
    assert f"--durable mine: a {kind} follows the log through {kind}, {kind}-2," in result.stderr


def test_a_request_imports_the_nats_client_without_its_websockets() -> None:
    """aiohttp (websockets only) is hidden while nats-py is imported, and importable
    after: a CLI call that publishes does not pay for it, nothing else loses it."""
    probe = (
        "import sys\n"
        "from services.adapters.nats_import import import_nats_client\n"
        "import_nats_client(websockets=False)\n"
        "import nats.aio.transport as t\n"
        "assert t.aiohttp is None and 'aiohttp' not in sys.modules\n"
        "import aiohttp\n"
        "print('ok', aiohttp.__name__)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0 and p.stdout.strip() == "ok aiohttp", p.stderr


_DAEMON_PROBE = """
import json, sys
sys.argv = ["fgpu", *json.loads(sys.argv[1])]
from services.cli.main import app
try:
    app()
except SystemExit:
    pass
sys.stderr.write("LOADED " + json.dumps(sorted(sys.modules)) + "\\n")
"""


def _daemon_loaded(home: Path, *args: str) -> set[str]:
    """The modules a daemon command had imported when it gave up on a dead server."""
    p = subprocess.run(
        [sys.executable, "-c", _DAEMON_PROBE, json.dumps(["--nats", DEAD_NATS, *args])],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FGPU_HOME": str(home)},
        check=False,
    )
    line = next((x for x in p.stderr.splitlines() if x.startswith("LOADED ")), None)
    assert line is not None, p.stderr
    assert "cannot connect to NATS" in p.stderr
    return set(json.loads(line.removeprefix("LOADED ")))


def _tops(modules: set[str], names: tuple[str, ...]) -> set[str]:
    return {m.split(".")[0] for m in modules} & set(names)


def test_an_actor_imports_neither_websockets_nor_what_other_services_use(tmp_path: Path) -> None:
    """``fgpu scheduler`` and ``fgpu quota`` import nats-py without aiohttp (websockets
    only) and none of the agent's, the gatekeeper's or the read API's modules; a dummy
    agent none of the Docker client's or the read API's: what an actor imports is most of
    its start. None imports the pipeline fold (YAML, cron schedules): the pipeline actor's
    alone."""
    web = ("aiohttp", "aiodocker", "duckdb", "pyarrow", "fastapi", "uvicorn", "nacl")
    web += ("yaml", "croniter")
    others = {
        "services.actors.agent",
        "services.actors.agent_channels",
        "services.actors.gatekeeper",
        "services.actors.intake",
        "services.adapters.nats_auth",
        "services.adapters.gpu_probe",
    }
    for command in (["scheduler"], ["quota"]):
        loaded = _daemon_loaded(tmp_path, *command)
        assert "nats" in _tops(loaded, ("nats",))
        assert _tops(loaded, web) == set(), command
        assert loaded & others == set(), command
    agent = ["agent", "--agent-id", "a-0", "--mock-gpus", "1", "--runtime", "dummy"]
    loaded = _daemon_loaded(tmp_path, *agent)
    assert "services.actors.agent" in loaded
    assert _tops(loaded, web) == set()


def test_fgpu_api_serves_the_log_on_its_own(cluster: Cluster, tmp_path: Path) -> None:
    """`fgpu api` projects a log it only reads and serves it; a second one on the same
    file is refused with one line (DuckDB lets one process write it)."""
    from tests.support.cli_stack import FGPU, wait_for_line

    env = {**os.environ, "FGPU_HOME": str(tmp_path)}
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [FGPU, "--nats", cluster.nats, "api", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        wait_for_line(log, "ready", process, 60)
        url = next(w for w in log.read_text().split() if w.startswith("http")).removesuffix("/v1")
        assert f"web UI   {url}/\n" in log.read_text()  # the researchers' UI, named at start
        # Its apps' origin too, another port, answering (a ticket-less opening refused).
        [apps] = [line.split()[1] for line in log.read_text().splitlines() if line[:5] == "apps "]
        assert apps.startswith("http://") and apps != url
        with pytest.raises(urllib.error.HTTPError, match="403"):
            urllib.request.urlopen(f"{apps}/open", timeout=10)
        mine = ReadApi(url).get("/v1/agents")["agents"]
        assert [a["id"] for a in mine] == [a["id"] for a in cluster.get("/v1/agents")["agents"]]
        second = subprocess.run(
            [FGPU, "--nats", cluster.nats, "api", "--port", "0"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert second.returncode == 1, second.stderr
        assert "give --db another file" in second.stderr
    finally:
        process.terminate()
        process.wait(20)


def test_the_stream_is_an_administrators_step() -> None:
    """No client creates the stream: a request on a server without it is one clear line;
    `fgpu stream create` makes it (once: again, it is up to date)."""
    with nats_server.nats_server() as server:

        def fgpu(*args: str) -> Any:
            return CliRunner().invoke(app, ["--nats", server.url, *args])

        request = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--", "true"]
        refused = fgpu(*request)
        assert refused.exit_code == 1
        assert refused.stderr == (
            "error: no stream FGPU on this server: an administrator creates it with "
            "'fgpu stream create'\n"
        )
        assert fgpu("stream", "info").exit_code == 1
        created = fgpu("stream", "create")
        assert created.exit_code == 0 and "created" in created.stdout
        again = fgpu("stream", "create")
        assert again.exit_code == 0 and "up to date" in again.stdout
        info = json.loads(fgpu("stream", "info", "--json").stdout)
        assert info["messages"] == 0 and "fgpu.sched" in info["subjects"]
        accepted = fgpu("--api", "http://127.0.0.1:9", *request)  # no API to check the image
        assert accepted.exit_code == 0 and accepted.stdout.startswith("s"), accepted.output
        assert json.loads(fgpu("stream", "info", "--json").stdout)["messages"] == 1


def test_what_users_wrote_is_printed_as_written(cluster: Cluster) -> None:
    """Names, commands and reasons come from users: rich markup in them is text."""
    name = "[/x] [bold]hi"
    args = ["session", "create", "--image", IMAGE, "--fgpu", "0.5", "--name", name]
    created = cluster.run(*args, "--wait", "--json", "--", "echo", "[red]")
    assert created.exit_code == 0, created.output
    [sid] = [s["id"] for s in json.loads(created.stdout)["sessions"]]
    info = cluster.run("session", "info", sid)
    assert info.exit_code == 0, info.output
    assert name in info.stdout and "echo [red]" in info.stdout
    events = cluster.run("events", "--session", sid)
    assert events.exit_code == 0 and name in events.stdout, events.output


def test_a_session_may_name_gpu_models_or_ask_for_no_gpu(cluster: Cluster) -> None:
    """The agent's GPUs are MockGPU: a session that names it runs, one that names only
    other models is refused as never fitting, and a CPU-only one runs holding no fGPU."""

    def create(*args: str) -> dict[str, Any]:
        ask = ["session", "create", "--image", IMAGE, "--cpu", "0.1", "--mem", "64m", "--wait"]
        result = cluster.run(*ask, "--json", *args, "--", "sleep", "60")
        assert result.exit_code in (0, 1), result.stderr
        [session] = json.loads(result.stdout)["sessions"]
        return dict(session)

    on_model = create("--fgpu", "0.1", "--gpu-model", "V100,MockGPU")
    assert on_model["status"] == "RUNNING"
    elsewhere = create("--fgpu", "0.1", "--gpu-model", "V100", "--gpu-model", "A100")
    assert elsewhere["status"] == "REJECTED" and "V100" in (elsewhere["reason"] or "")
    cpu = create("--cpu-only")
    assert cpu["status"] == "RUNNING" and float(cpu["requested"]["fgpu"]) == 0
    cluster.run("session", "rm", on_model["id"], cpu["id"])
