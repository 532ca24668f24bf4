"""The read API (projector and server) over a NATS URL, run in a thread for CLI tests."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal

from services.actors.access_audit import AccessAudit
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.api.auth import TokenSigner
from services.api.serve import ReadApi, serve_read_api
from services.ports import FolderStore

__all__ = ["read_api"]


async def _serve(
    url: str,
    db: Path,
    signer: TokenSigner | None,
    vfolders: FolderStore | None,
    *,
    task_status: TaskStatus[ReadApi],
) -> None:
    events = await connect(url, name="test-read-api")
    audit = AccessAudit(events, SystemClock(), "api", "api")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(audit.run)
            await serve_read_api(
                events,
                db,
                signer=signer,
                recorder=audit,
                vfolders=vfolders,
                task_status=task_status,
            )
    finally:
        with anyio.CancelScope(shield=True):
            await events.close()


@contextmanager
def read_api(
    nats_url: str,
    db: Path,
    signer: TokenSigner | None = None,
    vfolders: FolderStore | None = None,
) -> Iterator[ReadApi]:
    """The read API projecting ``nats_url`` into ``db``, its tokens signed by ``signer``
    (and the storage service of ``vfolders``), for the block; ready (caught up with the
    log as it was) when the block starts."""
    with start_blocking_portal("asyncio") as portal:
        running, api = portal.start_task(_serve, nats_url, db, signer, vfolders)
        try:
            yield api
        finally:
            running.cancel()
