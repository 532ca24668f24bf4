"""The storage service with real keypairs (signed in as the read API signs in): a folder's
owner writes it, a user it is shared with read-only reads it and may not write it, anyone
else is refused; the quota refuses an upload that would pass it; an upload resumes at its
file's size and a download at a byte (``Range``); no path leads out of a folder; each
upload's scan is on the log; a purged folder's files are deleted."""

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import httpx
import pytest

from events import (
    AddMember,
    AdminCommand,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    CreateVfolder,
    PurgeVfolders,
    RemoveVfolder,
    Role,
    ShareVfolder,
    VfolderScanned,
)
from services.adapters.vfolder_files import FolderFiles
from services.api.app import create_app
from services.api.auth import TokenSigner
from services.api.vfolder_routes import Storage
from services.domain.keys import hash_secret
from services.domain.tenancy import Tenancy, apply
from services.testing import MemoryLog

pytestmark = pytest.mark.anyio
SECRET = "s3cret-for-tests"
HASH = hash_secret(SECRET)
FOLDER = "/v1/vfolders/vf-alice"


class _Source:
    """What the API reads through; only the tenancy matters to these routes."""

    def __init__(self, t: Tenancy) -> None:
        self.t = t

    @property
    def last_seq(self) -> int:
        return 0

    def cursor(self) -> duckdb.DuckDBPyConnection:
        raise AssertionError("the storage routes read no projection")

    async def wait_beyond(self, seq: int) -> int:
        await anyio.sleep_forever()
        return seq

    def tenancy(self) -> Tenancy:
        return self.t


def _tenancy(*more: AdminCommand) -> Tenancy:
    """alice, bob and mallory in lab (alice's folder ``data``, 100 bytes, shared with bob
    read-only); eve in another domain."""
    t = Tenancy()
    commands: list[AdminCommand] = [
        CreateDomain(domain="lab"),
        CreateProject(domain="lab", project="a"),
        CreateDomain(domain="other"),
    ]
    for user, domain in (("alice", "lab"), ("bob", "lab"), ("mallory", "lab"), ("eve", "other")):
        commands += [
            CreateUser(user=user, domain=domain),
            CreateKeypair(access_key=f"AK{user}", user=user, secret_hash=HASH),
        ]
    commands += [
        AddMember(user="alice", project="a"),
        CreateVfolder(vfolder_id="vf-alice", name="data", user="alice", quota_bytes=100),
        ShareVfolder(vfolder_id="vf-alice", target="user:bob", access="ro"),
        *more,
    ]
    for c in commands:
        apply(t, c)
    return t


class _Api:
    def __init__(self, client: httpx.AsyncClient, log: MemoryLog, storage: Storage) -> None:
        self.client = client
        self.log = log
        self.storage = storage
        self.tokens: dict[str, str] = {}

    async def as_(self, who: str) -> dict[str, str]:
        if who not in self.tokens:
            r = await self.client.post(
                "/v1/auth/token", json={"access_key": f"AK{who}", "secret_key": SECRET}
            )
            assert r.status_code == 200, r.text
            self.tokens[who] = r.json()["token"]
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    async def put(self, who: str, path: str, body: bytes, **params: Any) -> httpx.Response:
        url = f"{FOLDER}/files/{path}"
        return await self.client.put(url, content=body, params=params, headers=await self.as_(who))

    async def get(self, who: str, path: str, **kw: Any) -> httpx.Response:
        headers = {**await self.as_(who), **kw.pop("headers", {})}
        return await self.client.get(path, headers=headers, **kw)

    async def scans(self) -> list[VfolderScanned]:
        return [
            r.event
            async for batch in self.log.read(0)
            for r in batch
            if isinstance(r.event, VfolderScanned)
        ]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[_Api]:
    log = MemoryLog()
    storage = Storage(FolderFiles(tmp_path), log)
    app = create_app(_Source(_tenancy()), signer=TokenSigner(b"k" * 32), storage=storage)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://storage") as client:
        yield _Api(client, log, storage)


async def test_the_owner_writes_a_reader_reads_and_others_are_refused(api: _Api) -> None:
    r = await api.put("alice", "runs/1/out.txt", b"0123456789")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "path": "runs/1/out.txt",
        "size": 10,
        "folder_bytes": 10,
        "quota_bytes": 100,
    }
    [scan] = await api.scans()
    assert (scan.host, scan.vfolder_id, scan.bytes, scan.files) == ("local", "vf-alice", 10, 1)
    assert scan.actor == "storage:local"

    got = await api.get("bob", f"{FOLDER}/files/runs/1/out.txt")
    assert got.status_code == 200 and got.content == b"0123456789"
    listed = await api.get("bob", f"{FOLDER}/files", params={"path": "runs/1"})
    assert [(e["name"], e["kind"], e["size"]) for e in listed.json()] == [("out.txt", "file", 10)]
    [seen] = (await api.get("bob", "/v1/vfolders")).json()
    assert (seen["name"], seen["access"], seen["shares"]) == ("data", "ro", {})

    r = await api.put("bob", "mine.txt", b"x")
    assert r.status_code == 403 and "may not write folder data" in r.json()["detail"]
    for stranger in ("mallory", "eve"):  # not even told that the folder exists
        r = await api.get(stranger, f"{FOLDER}/files/runs/1/out.txt")
        assert r.status_code == 404, stranger
        assert r.json()["detail"] == "no folder 'vf-alice'"
        assert (await api.put(stranger, "x.txt", b"x")).status_code == 404
        assert (await api.get(stranger, "/v1/vfolders")).json() == []
    assert (await api.client.get(f"{FOLDER}/files")).status_code == 401  # no token at all


async def test_a_scan_counts_what_sessions_wrote_and_says_it_on_the_log(
    api: _Api, tmp_path: Path
) -> None:
    assert (await api.put("alice", "up.txt", b"12345")).status_code == 200
    (tmp_path / "local" / "vf-alice" / "by-a-session.txt").write_bytes(b"x" * 20)
    r = await api.client.post(f"{FOLDER}/scan", headers=await api.as_("bob"))
    assert r.status_code == 200 and (r.json()["bytes"], r.json()["files"]) == (25, 2)
    assert [(e.bytes, e.files) for e in await api.scans()] == [(5, 1), (25, 2)]
    r = await api.client.post(f"{FOLDER}/scan", headers=await api.as_("eve"))
    assert r.status_code == 404


async def test_an_upload_past_the_quota_is_refused_and_leaves_nothing(api: _Api) -> None:
    assert (await api.put("alice", "a.bin", b"a" * 60)).status_code == 200
    r = await api.put("alice", "b.bin", b"b" * 50)
    assert r.status_code == 413
    assert r.json()["detail"] == (
        "folder data allows 100 bytes; it holds 60, and 50 more would pass it"
    )
    assert (await api.get("alice", f"{FOLDER}/stat", params={"path": "b.bin"})).json()[
        "size"
    ] is None
    # Replacing a file counts what it replaces: 90 bytes in place of 60 fit.
    r = await api.put("alice", "a.bin", b"c" * 90, replace="true")
    assert r.status_code == 200 and r.json()["folder_bytes"] == 90


async def test_an_upload_resumes_at_its_files_size_and_a_download_at_a_byte(api: _Api) -> None:
    assert (await api.put("alice", "big.bin", b"0123")).status_code == 200
    stat = (await api.get("alice", f"{FOLDER}/stat", params={"path": "big.bin"})).json()
    assert stat == {"path": "big.bin", "size": 4, "folder_bytes": 4, "quota_bytes": 100}
    r = await api.put("alice", "big.bin", b"xyz", offset=2)  # not where it stopped
    assert r.status_code == 409 and "resume at 4" in r.json()["detail"]
    r = await api.put("alice", "big.bin", b"0123")  # at 0 without replace: kept
    assert r.status_code == 409 and "replace=true" in r.json()["detail"]
    r = await api.put("alice", "big.bin", b"456789", offset=4)
    assert r.status_code == 200 and r.json()["size"] == 10
    whole = await api.get("alice", f"{FOLDER}/files/big.bin")
    assert whole.content == b"0123456789"
    rest = await api.get("alice", f"{FOLDER}/files/big.bin", headers={"Range": "bytes=6-"})
    assert rest.status_code == 206 and rest.content == b"6789"


async def test_no_path_leads_out_of_the_folder(api: _Api, tmp_path: Path) -> None:
    assert (await api.put("alice", "ok.txt", b"ok")).status_code == 200
    top = tmp_path / "local" / "vf-alice"
    secret = tmp_path / "outside.txt"
    secret.write_text("not yours")
    os.symlink(tmp_path, top / "escape")  # as a session could
    os.symlink(secret, top / "link.txt")
    for path in ("escape/outside.txt", "link.txt"):
        r = await api.get("alice", f"{FOLDER}/files/{path}")
        assert r.status_code in (403, 409), (path, r.status_code)
        assert b"not yours" not in r.content
    r = await api.get("alice", f"{FOLDER}/files", params={"path": "../.."})
    assert r.status_code == 400
    assert (await api.put("alice", "escape/planted.txt", b"x")).status_code == 403
    assert (await api.put("alice", "link.txt", b"x", replace="true")).status_code == 409
    os.mkfifo(top / "pipe")  # no reader: opening it to write would block for ever
    assert (await api.put("alice", "pipe", b"x", replace="true")).status_code == 409
    assert secret.read_text() == "not yours" and not (tmp_path / "planted.txt").exists()
    listed = (await api.get("alice", f"{FOLDER}/files")).json()
    assert {(e["name"], e["kind"]) for e in listed} == {
        ("escape", "link"),
        ("link.txt", "link"),
        ("ok.txt", "file"),
        ("pipe", "other"),
    }


async def test_a_purged_folders_files_are_deleted_and_a_trashed_one_is_closed(
    tmp_path: Path,
) -> None:
    t = _tenancy()
    files = FolderFiles(tmp_path)
    storage = Storage(files, None)
    folder = t.vfolders["vf-alice"]
    top = files.path(folder, "")
    (top / "kept.txt").write_text("data")
    apply(t, RemoveVfolder(vfolder_id="vf-alice"))
    apply(t, CreateUser(user="dan", domain="lab", role=Role.DOMAIN_ADMIN))
    apply(t, CreateKeypair(access_key="AKdan", user="dan", secret_hash=HASH))
    app = create_app(_Source(t), signer=TokenSigner(b"k" * 32), storage=storage)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://storage") as client:
        api = _Api(client, MemoryLog(), storage)
        r = await api.get("alice", f"{FOLDER}/files/kept.txt")
        assert r.status_code == 404  # in the trash: nobody reads it
        assert (await api.get("alice", "/v1/vfolders")).json() == []
        assert (await api.get("dan", "/v1/vfolders")).json() == []
        [trashed] = (await api.get("dan", "/v1/vfolders", params={"trash": "true"})).json()
        assert (trashed["id"], trashed["state"], trashed["access"]) == ("vf-alice", "trashed", None)
        assert (await api.get("bob", "/v1/vfolders", params={"trash": "true"})).json() == []
    assert (top / "kept.txt").exists()  # but its files are kept until the trash is emptied

    apply(t, PurgeVfolders(vfolder_ids=("vf-alice",)))
    passed = anyio.Event()

    async def wait_beyond(seq: int) -> int:
        passed.set()  # one pass is done
        await anyio.sleep_forever()
        return seq

    async with anyio.create_task_group() as tg:
        tg.start_soon(storage.reap, lambda: t, wait_beyond)
        with anyio.fail_after(10):
            await passed.wait()
        tg.cancel_scope.cancel()
    assert not top.exists()
