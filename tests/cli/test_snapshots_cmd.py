"""``fgpu admin snapshots``: each kind's snapshot, its health and age, as an actor starting
now would find it; the services' keypairs read it, no person's."""

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from events import Slots
from events import subjects as subj
from services.actors.common import rebuild
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.cli.main import app
from services.client import Client
from services.domain.fold.state_codec import encode_actor_state
from services.domain.pipelines.runs import PipelineState
from services.domain.pipelines.snapshot import encode_pipeline_state
from tests.support.cluster import GIB
from tests.support.tenancy_env import secured_cluster

pytestmark = pytest.mark.anyio


async def _cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return await anyio.to_thread.run_sync(lambda: CliRunner(env=env).invoke(app, list(args)))


async def test_it_says_each_snapshots_health_and_age() -> None:
    """The scheduler's sound, the quota's chunks gone: ok with what it covers, and corrupt
    with the reason; both with their age."""
    with nats_server.nats_server() as server:
        log = await connect(server.url)
        try:
            await log.create_or_update_stream()
            client = Client(log, SystemClock(), "alice")
            await client.create(image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB))
            state = await rebuild(log)
            await client.create(image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB))
            scheduler = await log.js.object_store(subj.snapshot_bucket("scheduler"))
            await scheduler.put("state", encode_actor_state(state, await log.identity()))
            quota = await log.js.object_store(subj.snapshot_bucket("quota"))
            nuid = (await quota.put("state", os.urandom(300_000))).nuid
            chunks = f"$O.{subj.snapshot_bucket('quota')}.C.{nuid}"
            await log.js.purge_stream(subj.snapshot_stream("quota"), subject=chunks)
            pipeline = await log.js.object_store(subj.snapshot_bucket("pipeline"))
            runs = PipelineState(last_seq=2)
            await pipeline.put("state", encode_pipeline_state(runs, await log.identity()))
        finally:
            await log.close()

        shown = await _cli("--nats", server.url, "admin", "snapshots", "--json")
        assert shown.exit_code == 0, shown.output
        rows = {r["kind"]: r for r in json.loads(shown.stdout)}
        assert rows["scheduler"]["health"] == "ok" and rows["scheduler"]["reason"] is None
        assert (rows["scheduler"]["seq"], rows["scheduler"]["behind"]) == (1, 1)
        assert rows["quota"]["health"] == "corrupt" and rows["quota"]["seq"] is None
        assert "its meta names 3 chunks, 0 are stored" in rows["quota"]["reason"]
        assert (rows["pipeline"]["health"], rows["pipeline"]["seq"]) == ("ok", 2)
        for r in rows.values():
            assert r["saved_at"] is not None and r["age_s"] >= 0
        table = await _cli("--nats", server.url, "admin", "snapshots")
        assert table.exit_code == 0, table.output
        assert "corrupt" in table.stdout and "covers the log to 1, 1 behind its end" in table.stdout


async def test_a_person_is_refused_and_the_services_keypairs_read_them(tmp_path: Path) -> None:
    async with secured_cluster(services=("archiver",)) as c:
        args = ["--nats", c.url, "--access-key", c.root.access_key, "admin", "snapshots"]
        env = {"FGPU_SECRET_KEY": c.root.secret}
        refused = await _cli(*args, env=env)  # the superadmin's own keypair: a person's
        assert refused.exit_code == 1
        assert "only the cluster's services read the actors' snapshots" in refused.stderr
        key, secret = c.services["archiver"]
        keys = tmp_path / "services.json"
        keys.write_text(json.dumps({"archiver": {"access_key": key, "secret": secret}}))
        allowed = await _cli("--service-keys", str(keys), *args, "--json", env=env)
        assert allowed.exit_code == 0, allowed.output
        assert [(r["kind"], r["health"]) for r in json.loads(allowed.stdout)] == [
            (kind, "none") for kind in subj.SNAPSHOT_KINDS
        ]
