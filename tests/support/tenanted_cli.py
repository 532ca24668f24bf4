"""A cluster with tenancy (real NATS, in-process actors, the read API) and the ``fgpu``
command run against it in-process, for the CLI's tests."""

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal
from typer.testing import CliRunner

from services.actors.bootstrap import FirstAdmin, bootstrap, publish_secrets_key
from services.actors.pipeline import PipelineActor
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import connect
from services.adapters.sealed_box import SealedBoxKey
from services.adapters.system_clock import SystemClock
from services.cli.main import app
from tests.support.api_stack import read_api
from tests.support.cluster import agent_config, running_cluster

__all__ = ["Tenanted", "tenanted"]


@dataclass(frozen=True)
class Tenanted:
    nats: str
    api: str
    root: FirstAdmin
    secrets: dict[str, str] = field(default_factory=dict)  # of the keypairs made here

    def run(self, *args: str, key: str | None = None, stdin: str | None = None) -> Any:
        key = key or self.root.access_key
        secret = self.root.secret if key == self.root.access_key else self.secrets.get(key)
        given = ["--nats", self.nats, "--api", self.api, "--access-key", key, *args]
        env = {"FGPU_SECRET_KEY": secret} if secret else {}
        return CliRunner(env=env).invoke(app, given, input=stdin)

    def ok(self, *args: str, key: str | None = None) -> Any:
        """The JSON of ``fgpu ARGS --json`` (``--json`` before a ``--``), which must succeed;
        a keypair it makes is remembered, to speak as."""
        i = args.index("--") if "--" in args else len(args)
        result = self.run(*args[:i], "--json", *args[i:], key=key)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        if isinstance(out, dict) and out.get("secret_key"):
            self.secrets[out["access_key"]] = out["secret_key"]
        return out


async def _actors(
    url: str,
    secrets: SealedBoxKey | None,
    folders: Path,
    *,
    task_status: TaskStatus[FirstAdmin],
) -> None:
    events = await connect(url, name="test-tenancy")
    try:
        await events.create_or_update_stream()
        first = await bootstrap(events, SystemClock())
        assert first is not None
        if secrets is not None:
            await publish_secrets_key(events, SystemClock(), secrets.public_key)
        config = dataclasses.replace(agent_config("a1"), vfolder_root=str(folders))
        agents = [(config, DummyRuntime())]
        async with (
            running_cluster(events, agents, secrets=secrets),
            anyio.create_task_group() as tg,
        ):
            await tg.start(PipelineActor(events, SystemClock()).run)
            task_status.started(first)
            await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await events.close()


@contextmanager
def tenanted(directory: Path, secrets: SealedBoxKey | None = None) -> Iterator[Tenanted]:
    """The cluster (the pipeline actor among its actors; its secrets key ``secrets``, said
    on the log and held by its agent), its projections and its virtual folders in
    ``directory``, until the block ends."""
    with nats_server.nats_server() as server, start_blocking_portal("asyncio") as portal:
        running, first = portal.start_task(_actors, server.url, secrets, directory / "folders")
        try:
            with read_api(server.url, directory / "p.duckdb") as api:
                yield Tenanted(server.url, api.url, first)
        finally:
            running.cancel()
