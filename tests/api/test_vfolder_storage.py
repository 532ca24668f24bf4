"""The storage service with real keypairs (signed in as the read API signs in) and its
real folder helper: a folder's owner writes it, a user it is shared with read-only reads
it and may not write, remove or rename in it, anyone else is refused; the quota refuses
an upload that would pass it; an upload appears whole or not at all, and one cut short
resumes from what it left; files and directories are removed and renamed; no path leads
out of a folder; malformed paths get 4xx; the helper runs as the storage uid and keeps
the folders private (0700, 0600); each upload's scan is on the log; a purged folder's
files are deleted."""

import contextlib
import os
import signal
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from events import CreateKeypair, CreateUser, PurgeVfolders, RemoveVfolder, Role
from services.actors.vfolder_dirs import make_folder_dir
from services.adapters.memory_log import MemoryLog
from services.adapters.vfolder_files import FolderFiles, HelperFailed
from services.api.vfolder_routes import Storage
from services.domain.tenancy.admin import apply
from services.domain.tenancy.vfolders import STORAGE_UID
from services.ports import FolderError
from tests.support.vfolder_env import FOLDER, HASH, Api, app_of, served, tenancy

pytestmark = pytest.mark.anyio
AS_ROOT = os.geteuid() == 0


@pytest.fixture
def files(tmp_path: Path) -> Iterator[FolderFiles]:
    with FolderFiles(tmp_path / "vfolders") as files:
        yield files


@pytest.fixture
def top(files: FolderFiles) -> Path:
    """alice's folder ``data`` (made, as its first upload or mount makes it)."""
    path = Path(files.root) / "local" / "vf-alice"
    path.mkdir(parents=True, mode=0o700)
    if AS_ROOT:
        for p in (path.parent, path):
            os.chown(p, *files.owner)
    return path


@pytest.fixture
async def api(files: FolderFiles) -> AsyncIterator[Api]:
    log = MemoryLog()
    storage = Storage(files, log)
    transport = httpx.ASGITransport(app=app_of(tenancy(), storage))
    async with httpx.AsyncClient(transport=transport, base_url="http://storage") as client:
        yield Api(client, log, storage)


async def test_the_owner_writes_a_reader_reads_and_others_are_refused(api: Api) -> None:
    r = await api.put("alice", "runs/1/out.txt", b"0123456789")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "path": "runs/1/out.txt",
        "size": 10,
        "partial": None,
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
    seen = {f["id"]: f for f in (await api.get("bob", "/v1/vfolders")).json()}
    assert (seen["vf-alice"]["name"], seen["vf-alice"]["access"]) == ("data", "ro")
    assert seen["vf-alice"]["shares"] == {}

    # Read-only: bob may not write, remove or rename; strangers may do nothing.
    r = await api.put("bob", "mine.txt", b"x")
    assert r.status_code == 403 and "may not write folder data" in r.json()["detail"]
    assert (await api.delete("bob", "runs/1/out.txt")).status_code == 403
    assert (await api.move("bob", "runs/1/out.txt", "moved.txt")).status_code == 403
    for stranger in ("mallory", "eve"):  # not even told that the folder exists
        r = await api.get(stranger, f"{FOLDER}/files/runs/1/out.txt")
        assert r.status_code == 404, stranger
        assert r.json()["detail"] == "no folder 'vf-alice'"
        assert (await api.put(stranger, "x.txt", b"x")).status_code == 404
        assert (await api.delete(stranger, "runs/1/out.txt")).status_code == 404
        assert (await api.move(stranger, "runs", "elsewhere")).status_code == 404
        assert (await api.get(stranger, "/v1/vfolders")).json() == []
    assert await api.names("alice", "runs/1") == {"out.txt"}
    assert (await api.client.get(f"{FOLDER}/files")).status_code == 401  # no token at all


async def test_a_scan_counts_what_sessions_wrote_and_says_it_on_the_log(
    api: Api, top: Path
) -> None:
    assert (await api.put("alice", "up.txt", b"12345")).status_code == 200
    (top / "by-a-session.txt").write_bytes(b"x" * 20)
    r = await api.client.post(f"{FOLDER}/scan", headers=await api.as_("bob"))
    assert r.status_code == 200 and (r.json()["bytes"], r.json()["files"]) == (25, 2)
    assert [(e.bytes, e.files) for e in await api.scans()] == [(5, 1), (25, 2)]
    r = await api.client.post(f"{FOLDER}/scan", headers=await api.as_("eve"))
    assert r.status_code == 404


async def test_an_upload_past_the_quota_is_refused_and_leaves_nothing(api: Api) -> None:
    assert (await api.put("alice", "a.bin", b"a" * 60)).status_code == 200
    r = await api.put("alice", "b.bin", b"b" * 50)
    assert r.status_code == 413
    assert r.json()["detail"] == (
        "folder data allows 100 bytes; it holds 60, and 50 more would pass it"
    )
    assert await api.stat("alice", "b.bin") == {
        "path": "b.bin",
        "size": None,
        "partial": None,
        "folder_bytes": 60,
        "quota_bytes": 100,
    }
    assert await api.names("alice") == {"a.bin"}  # no hidden upload either
    # Replacing a file counts what it replaces: 90 bytes in place of 60 fit.
    r = await api.put("alice", "a.bin", b"c" * 90, replace="true")
    assert r.status_code == 200 and r.json()["folder_bytes"] == 90


@contextlib.contextmanager
def _cut_short(url: str, token: str, target: str, body: bytes, declared: int) -> Iterator[None]:
    """A PUT that says ``declared`` bytes and sends ``body``, then hangs up at the end of
    the block, as a client whose connection broke."""
    where = urlsplit(url)
    head = (
        f"PUT {FOLDER}/files/{target} HTTP/1.1\r\nHost: storage\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {declared}\r\n\r\n"
    ).encode()
    with socket.create_connection((where.hostname, where.port)) as sock:
        sock.sendall(head + body)
        yield


async def _written(api: Api, path: str, partial: int) -> None:
    """Once the upload into ``path`` holds ``partial`` bytes aside."""
    with anyio.fail_after(10):
        while (await api.stat("alice", path))["partial"] != partial:  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_an_upload_appears_whole_and_one_cut_short_resumes(files: FolderFiles) -> None:
    storage = Storage(files, None)
    async with served(app_of(tenancy(), storage)) as url, httpx.AsyncClient(base_url=url) as c:
        api = Api(c, MemoryLog(), storage)
        assert (await api.put("alice", "big.bin", b"0123")).status_code == 200
        token = (await api.as_("alice"))["Authorization"].split()[1]

        # Cut short after 3 of 10 bytes: the file there is untouched, what came is kept
        # aside (stat says how much) until the upload goes on.
        with _cut_short(url, token, "big.bin?replace=true", b"abc", 10):
            await _written(api, "big.bin", 3)
            assert (await api.get("alice", f"{FOLDER}/files/big.bin")).content == b"0123"
        r = await api.put("alice", "big.bin", b"xyz", offset=2, replace="true")
        assert r.status_code == 409 and "resume at 3" in r.json()["detail"]
        r = await api.put("alice", "big.bin", b"defghij", offset=3)  # a file is there
        assert r.status_code == 409 and "replace=true" in r.json()["detail"]
        r = await api.put("alice", "big.bin", b"defghij", offset=3, replace="true")
        assert r.status_code == 200 and r.json()["size"] == 10
        state = await api.stat("alice", "big.bin")
        assert (state["size"], state["partial"], state["folder_bytes"]) == (10, None, 10)
        assert await api.names("alice") == {"big.bin"}

        whole = await api.get("alice", f"{FOLDER}/files/big.bin")
        assert whole.content == b"abcdefghij" and whole.headers["content-length"] == "10"
        rest = await api.get("alice", f"{FOLDER}/files/big.bin", headers={"Range": "bytes=6-"})
        assert rest.status_code == 206 and rest.content == b"ghij"
        assert rest.headers["content-range"] == "bytes 6-9/10"
        past = await api.get("alice", f"{FOLDER}/files/big.bin", headers={"Range": "bytes=10-"})
        assert past.status_code == 416

        # Resuming nothing, or where nothing stopped, is refused; at 0 it starts anew.
        r = await api.put("alice", "new.bin", b"x", offset=5)
        assert r.status_code == 409 and "start at 0" in r.json()["detail"]
        with _cut_short(url, token, "new.bin", b"zz", 10):
            await _written(api, "new.bin", 2)
        assert (await api.put("alice", "new.bin", b"fresh")).status_code == 200
        assert (await api.get("alice", f"{FOLDER}/files/new.bin")).content == b"fresh"
        assert await api.names("alice") == {"big.bin", "new.bin"}


async def test_a_folder_changing_under_an_upload_gives_409_and_leaves_nothing(
    files: FolderFiles,
) -> None:
    data = tenancy().vfolders["vf-alice"]
    up = files.upload(data, "runs/out.bin", 0, False)
    up.write(b"half")
    runs = Path(files.root) / "local" / "vf-alice" / "runs"
    for hidden in runs.iterdir():  # a session empties the directory and removes it
        hidden.unlink()
    runs.rmdir()
    with pytest.raises(FolderError) as refused:
        up.commit()
    assert refused.value.status == 409 and "changed" in refused.value.reason
    assert files.listing(data, "") == []


async def test_files_and_directories_are_removed_and_renamed(api: Api) -> None:
    for path in ("a/1.txt", "a/b/2.txt", "c.txt"):
        assert (await api.put("alice", path, b"xy")).status_code == 200
    r = await api.move("alice", "c.txt", "a/b/3.txt")
    assert r.status_code == 200 and r.json() == {"path": "c.txt", "to": "a/b/3.txt"}
    assert await api.names("alice", "a/b") == {"2.txt", "3.txt"}
    r = await api.move("alice", "a/1.txt", "a/b/2.txt")
    assert r.status_code == 409 and "replace=true" in r.json()["detail"]
    assert (await api.move("alice", "a/1.txt", "a/b/2.txt", replace="true")).status_code == 200
    assert (await api.move("alice", "a", "a/b/inside")).status_code == 409
    assert (await api.move("alice", "nothing", "x")).status_code == 404
    assert (await api.move("alice", "a", "no/such/dir")).status_code == 404
    assert (await api.move("alice", "a", "z")).status_code == 200  # a directory too

    r = await api.delete("alice", "z/b")
    assert r.status_code == 409 and "recursive=true" in r.json()["detail"]
    r = await api.delete("alice", "z/b/3.txt")
    assert r.status_code == 200 and r.json() == {
        "path": "z/b/3.txt",
        "kind": "file",
        "folder_bytes": 2,
        "quota_bytes": 100,
    }
    assert (await api.delete("alice", "z/b/3.txt")).status_code == 404
    r = await api.delete("alice", "z", recursive="true")
    assert r.status_code == 200 and (r.json()["kind"], r.json()["folder_bytes"]) == ("dir", 0)
    assert await api.names("alice") == set()
    assert (await api.delete("alice", "")).status_code in (400, 405)


async def test_no_path_leads_out_of_the_folder(api: Api, top: Path) -> None:
    assert (await api.put("alice", "ok.txt", b"ok")).status_code == 200
    outside = top.parents[2]
    secret = outside / "outside.txt"
    secret.write_text("not yours")
    os.symlink(outside, top / "escape")  # as a session could
    os.symlink(secret, top / "link.txt")
    for path in ("escape/outside.txt", "link.txt"):
        r = await api.get("alice", f"{FOLDER}/files/{path}")
        assert r.status_code in (403, 409), (path, r.status_code)
        assert b"not yours" not in r.content
    r = await api.get("alice", f"{FOLDER}/files", params={"path": "../.."})
    assert r.status_code == 400
    assert (await api.move("alice", "ok.txt", "../../ok.txt")).status_code == 400
    assert (await api.move("alice", "../../outside.txt", "here.txt")).status_code == 400
    r = await api.get("alice", f"{FOLDER}/files", params={"path": "escape"})
    assert r.status_code == 403 and "never followed" in r.json()["detail"]
    assert (await api.put("alice", "escape/planted.txt", b"x")).status_code == 403
    assert (await api.put("alice", "link.txt", b"x", replace="true")).status_code == 409
    assert (await api.move("alice", "escape/outside.txt", "stolen.txt")).status_code == 403
    assert (await api.move("alice", "ok.txt", "escape/ok.txt")).status_code == 403
    assert (await api.delete("alice", "escape/outside.txt")).status_code == 403
    os.mkfifo(top / "pipe")  # no writer: opening it to read would block for ever
    assert (await api.get("alice", f"{FOLDER}/files/pipe")).status_code == 409
    assert (await api.put("alice", "pipe", b"x", replace="true")).status_code == 409
    listed = (await api.get("alice", f"{FOLDER}/files")).json()
    assert {(e["name"], e["kind"]) for e in listed} == {
        ("escape", "link"),
        ("link.txt", "link"),
        ("ok.txt", "file"),
        ("pipe", "other"),
    }
    # A link is removed or renamed itself, never what it points to.
    assert (await api.move("alice", "link.txt", "renamed-link")).status_code == 200
    r = await api.delete("alice", "renamed-link")
    assert r.status_code == 200 and r.json()["kind"] == "link"
    assert (await api.delete("alice", "escape", recursive="true")).status_code == 200
    assert secret.read_text() == "not yours" and sorted(p.name for p in outside.iterdir()) == [
        "outside.txt",
        "vfolders",
    ]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("x" * 300, 400),  # one name over NAME_MAX
        ("d/" + "é" * 128, 400),  # 256 bytes in UTF-8
        ("/".join(["y" * 200] * 21), 414),  # over PATH_MAX
    ],
    ids=["name-300", "name-256-bytes", "path-4200"],
)
async def test_malformed_paths_get_4xx_on_every_route(api: Api, path: str, status: int) -> None:
    in_url = [
        await api.put("alice", path, b"x"),
        await api.get("alice", f"{FOLDER}/files/{path}"),
        await api.delete("alice", path),
    ]
    in_query = [
        await api.move("alice", path, "elsewhere"),
        await api.move("alice", "elsewhere", path),
        await api.get("alice", f"{FOLDER}/stat", params={"path": path}),
        await api.get("alice", f"{FOLDER}/files", params={"path": path}),
    ]
    assert [r.status_code for r in in_url] == [status] * 3
    # A query past 4,096 characters is refused by the route's own limit first.
    assert [r.status_code for r in in_query] == [status if len(path) <= 4096 else 422] * 4
    assert await api.names("alice") == set()


async def test_a_name_of_255_bytes_is_a_file_like_any_other(api: Api) -> None:
    name = "n" * 255
    assert (await api.put("alice", f"d/{name}", b"ok")).status_code == 200
    assert (await api.get("alice", f"{FOLDER}/files/d/{name}")).content == b"ok"
    assert await api.names("alice", "d") == {name}


async def test_the_helper_runs_as_the_storage_uid_and_keeps_the_folders_private(
    api: Api, files: FolderFiles
) -> None:
    want = (STORAGE_UID, STORAGE_UID) if AS_ROOT else (os.geteuid(), os.getegid())
    assert files.owner == want
    status = await anyio.Path(f"/proc/{files.helper_pid}/status").read_text()
    [uids] = [line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")]
    assert uids == [str(want[0])] * 4  # real, effective, saved, filesystem
    for path in ("a.txt", "runs/1/b.txt", "runs/2/c.txt"):
        assert (await api.put("alice", path, b"data")).status_code == 200
    assert (await api.move("alice", "runs/2", "moved")).status_code == 200
    assert await api.names("alice") == {"a.txt", "runs", "moved"}
    _assert_private(Path(files.root), want)


async def test_a_helper_that_cannot_start_says_why_and_one_that_died_is_started_again(
    tmp_path: Path, files: FolderFiles
) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(HelperFailed, match=r"did not start under .*a-file/vfolders"):
        FolderFiles(tmp_path / "a-file" / "vfolders")
    with pytest.raises(HelperFailed, match="may not be 0"):
        FolderFiles(tmp_path / "elsewhere", owner=(0, 0))
    data = tenancy().vfolders["vf-alice"]
    up = files.upload(data, "x.txt", 0, False)
    up.write(b"x")
    up.commit()
    first = files.helper_pid
    os.kill(first, signal.SIGKILL)
    with anyio.fail_after(10):
        while " Z " not in await anyio.Path(f"/proc/{first}/stat").read_text():  # noqa: ASYNC110
            await anyio.sleep(0.01)  # dead, not yet waited for
    assert files.stat(data, "x.txt").size == 1  # by a new helper
    assert files.helper_pid != first


def _assert_private(root: Path, owner: tuple[int, int]) -> None:
    """Every directory under ``root`` (itself included) is 0700 and every file 0600, all
    ``owner``'s."""
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == owner, path
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        assert stat.S_IMODE(st.st_mode) == want, (path, oct(st.st_mode))


@pytest.mark.skipif(not AS_ROOT, reason="only root makes files the storage uid cannot read")
async def test_what_a_session_made_as_root_is_refused_with_a_reason_never_500(
    api: Api, top: Path
) -> None:
    (top / "secret.bin").write_bytes(b"root's")  # a session's root writes, umask 077
    os.chmod(top / "secret.bin", 0o600)
    (top / "out").mkdir(mode=0o700)
    (top / "out" / "result.txt").write_text("done")
    r = await api.get("alice", f"{FOLDER}/files/secret.bin")
    assert r.status_code == 403 and "may not reach" in r.json()["detail"]
    assert (await api.stat("alice", "secret.bin"))["size"] == 6
    for answer in (
        await api.get("alice", f"{FOLDER}/files", params={"path": "out"}),
        await api.get("alice", f"{FOLDER}/files/out/result.txt"),
        await api.put("alice", "out/more.txt", b"x"),
        await api.delete("alice", "out", recursive="true"),
    ):
        assert answer.status_code == 403, (answer.request.url, answer.text)
    assert (await api.delete("alice", "secret.bin")).status_code == 200  # its directory's
    assert (await api.client.post(f"{FOLDER}/scan", headers=await api.as_("alice"))).json()[
        "bytes"
    ] == 0  # what it may not read is not counted


async def test_a_folder_an_agent_made_first_is_the_storage_services(
    api: Api, files: FolderFiles
) -> None:
    data = tenancy().vfolders["vf-alice"]
    made = make_folder_dir(files.root, data)  # as the agent does before it mounts
    assert made == files.where(data)
    assert (await api.put("alice", "from-the-api.txt", b"x")).status_code == 200
    _assert_private(Path(files.root), files.owner)


async def test_a_purged_folders_files_are_deleted_and_a_trashed_one_is_closed(
    files: FolderFiles, top: Path
) -> None:
    t = tenancy()
    storage = Storage(files, None)
    (top / "kept.txt").write_text("data")
    (top / "sub").mkdir()
    (top / "sub" / "deep.txt").write_text("data")
    if AS_ROOT:  # as the storage service or a session of the storage uid made them
        for made in (top / "kept.txt", top / "sub", top / "sub" / "deep.txt"):
            os.chown(made, *files.owner)
    apply(t, RemoveVfolder(vfolder_id="vf-alice"))
    apply(t, CreateUser(user="dan", domain="lab", role=Role.DOMAIN_ADMIN))
    apply(t, CreateKeypair(access_key="AKdan", user="dan", secret_hash=HASH))
    transport = httpx.ASGITransport(app=app_of(t, storage))
    async with httpx.AsyncClient(transport=transport, base_url="http://storage") as client:
        api = Api(client, MemoryLog(), storage)
        r = await api.get("alice", f"{FOLDER}/files/kept.txt")
        assert r.status_code == 404  # in the trash: nobody reads it
        assert (await api.get("alice", "/v1/vfolders")).json() == []
        assert [f["id"] for f in (await api.get("dan", "/v1/vfolders")).json()] == ["vf-bob"]
        [trashed] = (await api.get("dan", "/v1/vfolders", params={"trash": "true"})).json()
        assert (trashed["id"], trashed["state"], trashed["access"]) == ("vf-alice", "trashed", None)
        assert (await api.get("bob", "/v1/vfolders", params={"trash": "true"})).json() == []
    assert (top / "kept.txt").exists()  # but its files are kept until the trash is emptied

    # bob's folder holds what a session made as root: a directory the storage uid may
    # not empty. Its purge is refused, named in the log, and hurts no other.
    bobs = top.parent / "vf-bob"
    (bobs / "out").mkdir(parents=True)
    (bobs / "out" / "result.txt").write_text("data")
    if AS_ROOT:
        os.chown(bobs, *files.owner)
    apply(t, RemoveVfolder(vfolder_id="vf-bob"))
    apply(t, PurgeVfolders(vfolder_ids=("vf-bob", "vf-alice")))
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
    assert not await anyio.Path(top).exists() and await anyio.Path(top.parent).exists()
    left = await anyio.Path(bobs / "out" / "result.txt").exists()
    assert left == AS_ROOT  # as root, the session's directory was root's
