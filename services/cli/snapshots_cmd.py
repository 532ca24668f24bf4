"""``fgpu admin snapshots``: each actor snapshot's health and age, for an operator.

It asks what an actor starting now would make of each kind's latest snapshot
(``services.actors.snapshots.check``): the same reading, the same verdict.
"""

from typing import Any

import typer

from services.cli.options import Settings, connection, fail, out, print_json, run_async
from services.cli.tenancy_cmd import JsonOpt

__all__ = ["app", "snapshot_line"]

_READER = "archiver"  # the service that reads every kind's snapshot (how far it may archive)

app = typer.Typer()  # no group of its own: admin_cmd puts it in ``fgpu admin``


@app.command("snapshots")
def snapshots(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Each kind's latest actor snapshot (scheduler, quota): ok (an actor starting now
    starts from it), none, corrupt (its bytes are not what was saved: actors replay the
    log, and its writer saves a new one once it has), unusable (another log or fold
    version, or ahead of the log) or unreadable; the sequence it covers and how far the
    log is past it; its size and age.

    Who may: a snapshot holds the whole cluster's state, which no person's keypair may
    read. An administrator runs it with the services' keypairs (fgpu --service-keys
    services.json admin snapshots; `fgpu up` keeps them in its store), reading as the
    `archiver` service. A cluster without authentication lets anyone.
    """
    settings: Settings = ctx.obj
    rows = run_async(lambda: _rows(settings))
    if as_json:
        print_json(rows)
        return
    for r in rows:
        out().print(snapshot_line(r), highlight=False)


async def _rows(settings: Settings) -> list[dict[str, Any]]:
    from events import subjects as subj
    from services.actors.snapshots import survey

    as_reader = settings.identity(_READER)
    async with connection(settings, _READER) as conn:
        if conn.client.authenticates() and as_reader.access_key == settings.access_key:
            fail(
                f"only the cluster's services read the actors' snapshots, not "
                f"{settings.access_key}: run it with --service-keys services.json "
                "(the keypair of the archiver service there)",
                code=1,
            )
        stores = {kind: conn.snapshots(kind) for kind in subj.SNAPSHOT_KINDS}
        return await survey(stores, conn.log)


def snapshot_line(r: dict[str, Any]) -> str:
    """One kind's snapshot (``survey``'s row) in one line."""
    parts = [f"{r['kind']:<10} {r['health']:<10}"]
    if r["seq"] is not None:
        parts.append(f"covers the log to {r['seq']}, {r['behind']} behind its end")
    if r["reason"]:
        parts.append(r["reason"])
    if r["bytes"]:
        parts.append(f"{r['bytes']:,} bytes")
    if r["age_s"] is not None:
        parts.append(f"saved {r['age_s']:,.0f} s ago")
    return "  ".join(parts)
