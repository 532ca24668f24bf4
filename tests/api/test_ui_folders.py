"""The web UI's folders, through its routes, with a browser session's cookie: a folder
created and shared as the user's own requests (what ``fgpu vfolder create|share`` send,
on the user's own subject, judged by the registrar, a refusal answered as the log gave
it); a file uploaded in chunks that appears only when whole, resumed after a cut at any
offset with the same bytes, a wrong offset refused with where to resume; every cookie
write on the storage routes refused without its CSRF token or from another origin; a
read-only member and a stranger refused; a download that a browser saves and never
renders."""

import contextlib
import hashlib
import itertools
import os
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from events import (
    AdminRequested,
    CreateDomain,
    CreateKeypair,
    CreateUser,
    CreateVfolder,
    Role,
    ShareVfolder,
)
from events import subjects as subj
from services.api.browser import COOKIE
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from tests.support.ui_world import FOLDERS, UiWorld, ui_world

HTML = '<img src=x onerror="window.pwned=1">.html'


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-folders"), FOLDERS, vfolders=True) as world:
        yield world


class Signed:
    """A browser session of one user: its cookie, its CSRF token, its own page's Origin."""

    def __init__(self, w: UiWorld, who: str) -> None:
        self.w = w
        self.http, self.csrf = w.sign_in(who)

    def write(self, method: str, url: str, **kw: Any) -> httpx.Response:
        headers = {"Origin": self.w.url, "X-CSRF-Token": self.csrf, **kw.pop("headers", {})}
        return self.http.request(method, url, headers=headers, **kw)

    def put(self, folder: str, path: str, body: bytes, **params: Any) -> httpx.Response:
        return self.write("PUT", f"/v1/vfolders/{folder}/files/{path}", content=body, params=params)

    def stat(self, folder: str, path: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/vfolders/{folder}/stat", params={"path": path})
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found

    def names(self, folder: str) -> set[str]:
        return {e["name"] for e in self.http.get(f"/v1/vfolders/{folder}/files").json()}


def _create(s: Signed, name: str, **more: Any) -> dict[str, Any]:
    r = s.write("POST", "/ui/vfolders", json={"name": name, **more})
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


@pytest.fixture(scope="module")
def data(w: UiWorld) -> str:
    """alice's folder ``data`` (1 MiB of quota), shared read-only with bob; its id."""
    alice = Signed(w, "alice")
    made = _create(alice, "data", quota="1m")
    assert made["applied"], made
    r = alice.write("POST", f"/ui/vfolders/{made['vfolder_id']}/share", json={"user": "bob"})
    assert r.status_code == 200 and r.json()["applied"], r.text
    folder: str = made["vfolder_id"]
    return folder


def test_a_folder_is_created_as_the_users_own_request_and_a_refusal_says_the_logs_reason(
    w: UiWorld,
) -> None:
    alice = Signed(w, "alice")
    before = w.last_seq()
    made = _create(alice, "runs", request_id="r-runs-1")
    assert made["decided"] and made["applied"] and made["refused"] is None, made
    key = w.keys["alice"][0]
    subject, e = w.wait_for(before, lambda _, e: isinstance(e, AdminRequested))
    assert isinstance(e, AdminRequested) and isinstance(e.command, CreateVfolder)
    # What the CLI sends, on alice's own subject, in her name.
    assert subject == subj.admin(key, e.id) and e.requester == key and e.actor == key
    assert (e.command.name, e.command.user, e.command.vfolder_id) == (
        "runs",
        "alice",
        made["vfolder_id"],
    )
    seen = {f["id"]: f for f in alice.http.get("/v1/vfolders").json()}
    assert seen[made["vfolder_id"]]["name"] == "runs"
    # The same request again is the same request: one folder.
    again = _create(alice, "runs", request_id="r-runs-1")
    assert again["vfolder_id"] == made["vfolder_id"] and again["request_id"] == made["request_id"]
    assert [f["name"] for f in alice.http.get("/v1/vfolders").json()].count("runs") == 1

    # A name the registrar refuses, and one taken: refused as the log says, nothing made.
    bad = _create(alice, "<script>x</script>")
    assert (bad["decided"], bad["applied"], bad["code"]) == (True, False, "invalid"), bad
    assert "folder name '<script>x</script>' must be" in bad["refused"]
    taken = _create(alice, "runs")
    assert (taken["applied"], taken["code"]) == (False, "conflict"), taken
    r = alice.write("POST", "/ui/vfolders", json={"name": "q", "quota": "lots"})
    assert r.status_code == 422 and "quota" in r.json()["detail"]


def test_a_share_is_the_users_own_request_and_only_a_manager_is_let_share(
    w: UiWorld, data: str
) -> None:
    bob = Signed(w, "bob")
    seen = {f["id"]: f for f in bob.http.get("/v1/vfolders").json()}
    assert seen[data]["access"] == "ro" and seen[data]["user"] == "alice"
    # bob sees it, so may ask; the registrar refuses him: not his to share.
    r = bob.write("POST", f"/ui/vfolders/{data}/share", json={"user": "mallory", "access": "rw"})
    assert r.status_code == 200, r.text
    assert (r.json()["applied"], r.json()["code"]) == (False, "forbidden"), r.json()
    # mallory is not even told it exists; no user, or both, is a bad form.
    mallory = Signed(w, "mallory")
    r = mallory.write("POST", f"/ui/vfolders/{data}/share", json={"user": "mallory"})
    assert r.status_code == 404, r.text
    assert data not in {f["id"] for f in mallory.http.get("/v1/vfolders").json()}
    alice = Signed(w, "alice")
    for form in ({}, {"user": "bob", "project": "default/default"}, {"user": "a b"}):
        r = alice.write("POST", f"/ui/vfolders/{data}/share", json=form)
        assert r.status_code == 422, (form, r.text)

    before = w.last_seq()
    r = alice.write("POST", f"/ui/vfolders/{data}/share", json={"user": "bob", "access": "ro"})
    assert r.status_code == 200 and r.json()["applied"], r.text
    subject, e = w.wait_for(before, lambda _, e: isinstance(e, AdminRequested))
    assert isinstance(e, AdminRequested) and isinstance(e.command, ShareVfolder)
    assert subject.startswith(subj.admin(w.keys["alice"][0], ""))
    assert (e.command.target, e.command.access) == ("user:bob", "ro")


def _chunks(body: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    edges = [0, *cuts, len(body)]
    return [(a, body[a:b]) for a, b in itertools.pairwise(edges)]


def test_a_file_sent_in_chunks_appears_only_when_whole(w: UiWorld, data: str) -> None:
    alice = Signed(w, "alice")
    body = os.urandom(300_000)
    for offset, chunk in _chunks(body, [100_000, 250_001]):
        r = alice.put(data, "chunked.bin", chunk, offset=offset, total=len(body))
        assert r.status_code == 200, r.text
        if offset + len(chunk) < len(body):
            assert (r.json()["size"], r.json()["partial"]) == (None, offset + len(chunk))
            assert "chunked.bin" not in alice.names(data)  # never a short file
            assert alice.stat(data, "chunked.bin")["partial"] == offset + len(chunk)
    assert r.json()["size"] == len(body) and r.json()["partial"] is None
    got = alice.http.get(f"/v1/vfolders/{data}/files/chunked.bin")
    assert got.content == body
    # A chunk never replaces a file already there: only a whole upload, and asked to.
    r = alice.put(data, "chunked.bin", b"new", total=10)
    assert r.status_code == 409 and "replace=true" in r.json()["detail"]
    r = alice.put(data, "chunked.bin", b"new", total=10, replace="true")
    assert r.status_code == 200 and r.json()["partial"] == 3
    assert alice.http.get(f"/v1/vfolders/{data}/files/chunked.bin").content == body


@contextlib.contextmanager
def _cut(w: UiWorld, s: Signed, url: str, body: bytes, declared: int) -> Iterator[None]:
    """A PUT with the cookie that says ``declared`` bytes and sends ``body``, then hangs
    up at the end of the block, as a browser whose network broke (or that was closed)."""
    where = urlsplit(w.url)
    head = (
        f"PUT {url} HTTP/1.1\r\nHost: {where.netloc}\r\nOrigin: {w.url}\r\n"
        f"X-CSRF-Token: {s.csrf}\r\nCookie: {COOKIE}={s.http.cookies[COOKIE]}\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    with socket.create_connection((where.hostname, where.port)) as sock:
        sock.sendall(head + body)
        yield


def _held(s: Signed, folder: str, path: str, partial: int) -> None:
    """Back once the server holds ``partial`` bytes of the upload into ``path`` (asked
    again and again: the server tells nobody when it has written what came)."""
    deadline = time.monotonic() + 20
    while s.stat(folder, path)["partial"] != partial:
        assert time.monotonic() < deadline, f"never held {partial} bytes"
        time.sleep(0.01)  # between two questions, not a wait for the answer


@pytest.mark.parametrize("at", [1, 65_537, 199_999])
def test_an_upload_cut_at_any_offset_resumes_to_the_same_bytes(
    w: UiWorld, data: str, at: int
) -> None:
    alice = Signed(w, "alice")
    body = hashlib.sha256(str(at).encode()).digest() * 6250  # 200,000 bytes
    path = f"cut-{at}.bin"
    url = f"/v1/vfolders/{data}/files/{path}?offset=0&total={len(body)}"
    with _cut(w, alice, url, body[:at], len(body)):
        _held(alice, data, path, at)
    assert path not in alice.names(data)
    # Resumed elsewhere than where it stopped: refused, saying where.
    r = alice.put(data, path, body[at + 1 :], offset=at + 1, total=len(body))
    assert r.status_code == 409 and f"resume at {at}" in r.json()["detail"], r.text
    assert alice.stat(data, path)["partial"] == at  # the refusal kept what was held
    r = alice.put(data, path, body[at:], offset=at, total=len(body))
    assert r.status_code == 200 and r.json()["size"] == len(body), r.text
    assert alice.http.get(f"/v1/vfolders/{data}/files/{path}").content == body


def test_a_body_past_the_files_total_or_its_quota_is_refused(w: UiWorld, data: str) -> None:
    alice = Signed(w, "alice")
    r = alice.put(data, "long.bin", b"x" * 20, total=10)
    assert r.status_code == 400 and "passes the file's total" in r.json()["detail"], r.text
    r = alice.put(data, "long.bin", b"x", offset=5, total=3)
    assert r.status_code == 400 and "less than offset" in r.json()["detail"], r.text
    # The whole file is weighed against the quota (1 MiB) at its first chunk.
    r = alice.put(data, "huge.bin", b"x" * 10, total=2 << 20)
    assert r.status_code == 413 and "allows 1048576 bytes" in r.json()["detail"], r.text
    assert not {"long.bin", "huge.bin"} & alice.names(data)
    assert alice.stat(data, "huge.bin")["partial"] is None


def test_another_domains_admin_is_not_told_the_folder_exists(w: UiWorld, data: str) -> None:
    key, secret = new_access_key(), new_secret()
    for command in (
        CreateDomain(domain="other"),
        CreateUser(user="eve", domain="other", role=Role.DOMAIN_ADMIN),
        CreateKeypair(access_key=key, user="eve", secret_hash=hash_secret(secret)),
    ):
        w.apply(command)
    w.keys["eve"] = (key, secret)
    eve = Signed(w, "eve")
    assert data not in {f["id"] for f in eve.http.get("/v1/vfolders").json()}
    for r in (
        eve.write("POST", f"/ui/vfolders/{data}/share", json={"user": "eve"}),
        eve.put(data, "eve.bin", b"x", total=1),
        eve.http.get(f"/v1/vfolders/{data}/files"),
        eve.write("POST", f"/v1/vfolders/{data}/move", params={"path": "a", "to": "b"}),
    ):
        assert r.status_code == 404, r.text


def test_a_reader_and_a_stranger_may_not_write(w: UiWorld, data: str) -> None:
    bob, mallory = Signed(w, "bob"), Signed(w, "mallory")
    r = bob.put(data, "bobs.bin", b"x", total=1)
    assert r.status_code == 403 and "may not write folder data" in r.json()["detail"]
    assert bob.write("DELETE", f"/v1/vfolders/{data}/files/chunked.bin").status_code == 403
    r = bob.write("POST", f"/v1/vfolders/{data}/move", params={"path": "a", "to": "b"})
    assert r.status_code == 403
    for r in (
        mallory.put(data, "m.bin", b"x", total=1),
        mallory.http.get(f"/v1/vfolders/{data}/stat", params={"path": "m.bin"}),
        mallory.write("DELETE", f"/v1/vfolders/{data}/files/chunked.bin"),
    ):
        assert r.status_code == 404, r.text
    assert not {"bobs.bin", "m.bin"} & Signed(w, "alice").names(data)


@pytest.mark.parametrize(
    "headers",
    [
        {"X-CSRF-Token": ""},  # no token
        {"X-CSRF-Token": "forged"},
        {"Origin": "http://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
def test_a_cookie_write_on_the_storage_routes_needs_its_csrf_token_and_this_origin(
    w: UiWorld, data: str, headers: dict[str, str]
) -> None:
    alice = Signed(w, "alice")
    assert alice.put(data, "kept.txt", b"kept", total=4).status_code in (200, 409)
    refused = [
        alice.write("PUT", f"/v1/vfolders/{data}/files/csrf.txt", content=b"x", headers=headers),
        alice.write("DELETE", f"/v1/vfolders/{data}/files/kept.txt", headers=headers),
        alice.write(
            "POST",
            f"/v1/vfolders/{data}/move",
            params={"path": "kept.txt", "to": "moved.txt"},
            headers=headers,
        ),
        alice.write("POST", "/ui/vfolders", json={"name": "csrf"}, headers=headers),
        alice.write(
            "POST", f"/ui/vfolders/{data}/share", json={"user": "mallory"}, headers=headers
        ),
    ]
    assert [r.status_code for r in refused] == [403] * 5, [r.text for r in refused]
    names = alice.names(data)
    assert "kept.txt" in names and not {"csrf.txt", "moved.txt"} & names


def test_a_download_is_saved_never_rendered(w: UiWorld, data: str) -> None:
    alice = Signed(w, "alice")
    page = b"<html><script>window.pwned=1</script></html>"
    r = alice.put(data, HTML, page, total=len(page))
    assert r.status_code == 200, r.text
    got = alice.http.get(f"/v1/vfolders/{data}/files/{HTML}")
    assert got.status_code == 200 and got.content == page
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-disposition"] == (
        "attachment; filename*=UTF-8''%3Cimg%20src%3Dx%20onerror%3D%22window.pwned%3D1%22%3E.html"
    )
    csp = got.headers["content-security-policy"]
    assert "sandbox" in csp and "default-src 'none'" in csp
    assert httpx.get(f"{w.url}/v1/vfolders/{data}/files/{HTML}").status_code == 401


def test_a_revoked_key_writes_nothing(w: UiWorld, data: str) -> None:
    # Last of the module: mallory's key stays revoked.
    mallory = Signed(w, "mallory")
    w.revoke("mallory")
    r = mallory.write("POST", "/ui/vfolders", json={"name": "late"})
    assert r.status_code == 401, r.text
    assert mallory.put(data, "late.bin", b"x", total=1).status_code == 401
