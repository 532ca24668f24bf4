"""schemathesis against the read API's own OpenAPI document: no request makes it fail.

Requests are generated from ``/openapi.json`` (valid and invalid parameters alike) and
sent to the app over ASGI, on projections of the README scenario. Every answer must be a
documented status with a body that matches its documented schema, and never a 5xx. The
event stream is left out: it never ends (``test_api.py`` tests it).
"""

from collections.abc import Iterator
from pathlib import Path

import anyio
import duckdb
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from events import Record
from projections import ProjectionStore
from services.api import create_app
from services.domain.tenancy import Tenancy
from services.testing import MemoryLog
from tests.test_api import log_records, run_scenario


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


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[schemathesis.BaseSchema]:
    records = anyio.run(_scenario_records, backend="asyncio")
    path: Path = tmp_path_factory.mktemp("schema") / "p.duckdb"
    store = ProjectionStore(path, snapshot_every=5)
    store.apply(records)
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", create_app(_Source(store)))
    finally:
        store.close()


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=lambda m: m.value)
def test_the_api_never_fails_a_request(
    api_schema: schemathesis.BaseSchema, mode: schemathesis.GenerationMode
) -> None:
    # schemathesis' own pytest plugin does not run on pytest 9 yet: drive hypothesis here.
    operations = [result.ok() for result in api_schema.get_all_operations()]
    tested = 0
    for op in operations:
        if op.path == "/v1/events/stream":
            continue

        @settings(
            max_examples=20,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(mode))
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS)

        try:
            check()
        except Unsatisfiable:
            # Only strings in the path, or no parameter at all: nothing can be invalid.
            assert mode is schemathesis.GenerationMode.NEGATIVE, op.path
            continue
        tested += 1
    # Every operation, with valid data and with bad data: each takes a bearer token (or a
    # body), which can be wrong.
    assert tested == len(operations) - 1
