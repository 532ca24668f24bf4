"""Who may read the log's health and the stack's status through the read API: the health
(why a request may fail) any signed-in key, the status (``fgpu status``) superadmins
only; a user and a domain admin are refused it, saying so."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import duckdb
import httpx
import pytest

from events import CreateKeypair, CreateUser, LogHealth, Role, SetRole, SpaceState
from projections import ProjectionStore
from services.api.app import create_app
from services.api.auth import TokenSigner
from services.cli.snapshots_cmd import snapshot_line
from services.cli.status_cmd import status_lines
from services.domain.tenancy.model import Tenancy
from services.ports import LogError
from tests.support.vfolder_env import HASH, SECRET, Source, tenancy

pytestmark = pytest.mark.anyio

FULL = LogHealth(
    id="h1",
    at=datetime(2026, 1, 1, tzinfo=UTC),
    actor="store-watch",
    server="fgpu",
    path="/srv/store",
    state=SpaceState.FULL,
    free_bytes=0,
    total_bytes=64 << 20,
    watermark_bytes=3 << 20,
    reason="the log's disk is full: 0 bytes free at /srv/store",
    unwritable_since=datetime(2026, 1, 1, tzinfo=UTC),
)


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    t = tenancy(
        SetRole(user="bob", role=Role.DOMAIN_ADMIN),
        CreateUser(user="root", domain="lab", role=Role.SUPERADMIN),
        CreateKeypair(access_key="AKroot", user="root", secret_hash=HASH),
    )
    app = create_app(Source(t), signer=TokenSigner(b"k" * 32), health=lambda: [(FULL, True)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client


async def _as(client: httpx.AsyncClient, who: str) -> dict[str, str]:
    r = await client.post("/v1/auth/token", json={"access_key": f"AK{who}", "secret_key": SECRET})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


@pytest.mark.parametrize("who", ["alice", "bob"])  # a user, a domain admin
async def test_only_a_superadmin_may_see_the_status(api: httpx.AsyncClient, who: str) -> None:
    r = await api.get("/v1/status", headers=await _as(api, who))
    assert r.status_code == 403
    assert r.json()["detail"] == "only a superadmin may see the stack's status"
    assert (await api.get("/v1/status")).status_code == 401  # nobody signed in


@pytest.mark.parametrize("who", ["alice", "bob", "root"])
async def test_anyone_signed_in_may_see_why_the_log_cannot_write(
    api: httpx.AsyncClient, who: str
) -> None:
    r = await api.get("/v1/health", headers=await _as(api, who))
    assert r.status_code == 200
    [log] = r.json()["log"]
    assert log["state"] == "full" and log["live"] is True
    assert log["reason"] == "the log's disk is full: 0 bytes free at /srv/store"


def _snapshot(kind: str, health: str, reason: str | None = None) -> dict[str, object]:
    ok = health == "ok"
    return {
        "kind": kind,
        "health": health,
        "reason": reason,
        "seq": 7 if ok else None,
        "behind": 3 if ok else None,
        "bytes": 1000,
        "saved_at": "2026-01-01T00:00:00+00:00",
        "age_s": 60.0,
    }


class _Projected(Source):
    """The tenancy, and projections of a log with nothing else on it."""

    def __init__(self, t: Tenancy) -> None:
        super().__init__(t)
        self.store = ProjectionStore(":memory:")

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self.store.cursor()


def _app(snapshots: Any) -> httpx.AsyncClient:
    t = tenancy(
        CreateUser(user="root", domain="lab", role=Role.SUPERADMIN),
        CreateKeypair(access_key="AKroot", user="root", secret_hash=HASH),
    )
    app = create_app(_Projected(t), signer=TokenSigner(b"k" * 32), snapshots=snapshots)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


@pytest.mark.parametrize(
    ("found", "ok"),
    [
        ([_snapshot("scheduler", "ok"), _snapshot("quota", "none")], True),
        (
            [_snapshot("scheduler", "ok"), _snapshot("quota", "corrupt", "its digest differs")],
            False,
        ),
    ],
)
async def test_the_status_says_each_snapshots_health_and_age(
    found: list[dict[str, object]], ok: bool
) -> None:
    async def snapshots() -> list[dict[str, object]]:
        return found

    async with _app(snapshots) as api:
        r = await api.get("/v1/status", headers=await _as(api, "root"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is ok  # a corrupt snapshot is something to see to
    assert [(s["kind"], s["health"], s["reason"]) for s in body["snapshots"]] == [
        (s["kind"], s["health"], s["reason"]) for s in found
    ]
    lines = status_lines(body)
    assert lines[0] == ("all is well" if ok else "NOT WELL")
    assert [line for line in lines if line.startswith("snapshot ")] == [
        f"snapshot {snapshot_line(s)}" for s in body["snapshots"]
    ]


async def test_a_status_whose_snapshots_cannot_be_read_says_so() -> None:
    async def snapshots() -> list[dict[str, object]]:
        raise LogError("stream info: no answer")

    async with _app(snapshots) as api:
        body = (await api.get("/v1/status", headers=await _as(api, "root"))).json()
    assert body["ok"] is False
    assert [(s["health"], s["reason"]) for s in body["snapshots"]] == [
        ("unreadable", "stream info: no answer")
    ]


async def test_a_read_api_that_cannot_read_snapshots_says_null_not_none_found() -> None:
    async with _app(None) as api:
        body = (await api.get("/v1/status", headers=await _as(api, "root"))).json()
    assert body["snapshots"] is None and body["ok"] is True
    assert "snapshots: not read by this read API (fgpu admin snapshots)" in status_lines(body)
