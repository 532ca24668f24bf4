"""A request reads one snapshot: a batch committed while it reads shows in none of its parts.

The history endpoint reads a session's row, its transitions and its events in three
statements; here the projector commits the rest of the log between the first and the
second. The answer must be the session as it was when the request began, whole.
"""

from pathlib import Path
from typing import Any

import anyio
import duckdb
import httpx
import pytest

from events import Record
from projections import ProjectionStore, queries
from services.adapters.memory_log import MemoryLog
from services.api import create_app
from services.domain.fold.state import fold
from services.domain.tenancy.model import Tenancy
from tests.support.scenario import log_records, run_scenario

pytestmark = pytest.mark.anyio


class _Source:
    """The store, read the way the projector of ``fgpu up`` serves it."""

    def __init__(self, store: ProjectionStore) -> None:
        self.store = store

    @property
    def last_seq(self) -> int:
        return self.store.last_seq

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self.store.cursor()

    async def wait_beyond(self, seq: int) -> int:
        await anyio.sleep_forever()
        return seq

    def tenancy(self) -> Tenancy:
        return self.store.state.tenancy


async def _scenario_records() -> list[Record]:
    events = MemoryLog()
    await run_scenario(events)
    return await log_records(events)


async def test_a_batch_committed_during_a_history_read_shows_in_no_part_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = await _scenario_records()
    final = fold(records)
    # A cut after which some session still changes: it is read before and after.
    cut, sid = next(
        (cut, sid)
        for cut in range(1, len(records))
        for sid, v in fold(records[:cut]).sessions.items()
        if final.sessions[sid].status != v.status
    )
    before = fold(records[:cut]).sessions[sid]
    store = ProjectionStore(tmp_path / "p.duckdb")
    store.apply(records[:cut])
    transitions = queries.session_transitions

    def commit_then_read(con: duckdb.DuckDBPyConnection, session_id: str) -> list[Any]:
        if store.last_seq < records[-1].seq:
            store.apply(records[cut:])  # the projector's writer, between two statements
        return transitions(con, session_id)

    monkeypatch.setattr(queries, "session_transitions", commit_then_read)
    app = create_app(_Source(store))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api"
        ) as http:
            h = (await http.get(f"/v1/sessions/{sid}/history")).json()
            after = (await http.get(f"/v1/sessions/{sid}")).json()
    finally:
        store.close()
    assert store.last_seq == records[-1].seq  # the batch did commit during the read
    assert h["session"]["status"] == before.status.value
    assert [t["status"] for t in h["transitions"]] == [t.status.value for t in before.history]
    assert max(e["seq"] for e in h["events"]) <= records[cut - 1].seq
    assert after["status"] == final.sessions[sid].status.value
