"""Who may read the log's health and the stack's status through the read API: the health
(why a request may fail) any signed-in key, the status (``fgpu status``) superadmins
only; a user and a domain admin are refused it, saying so."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from vfolder_env import HASH, SECRET, Source, tenancy

from events import CreateKeypair, CreateUser, LogHealth, Role, SetRole, SpaceState
from services.api.app import create_app
from services.api.auth import TokenSigner

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
