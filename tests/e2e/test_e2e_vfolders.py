"""Virtual folders through the `fgpu` command, on `fgpu up` with real Docker: a folder is
created, a file uploaded (a broken upload resumed, and a broken download), a session
mounts it and copies the file, the copy is downloaded, renamed and removed; the quota
refuses a file too big; another user neither sees nor mounts it until it is shared
read-only, then reads it and may not write, rename or remove in it; nothing under the
folders' root is open to anyone else on the host; it goes to the trash, which only an
administrator empties."""

import http.client
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.cli_stack import Stack, fgpu_up
from tests.support.docker_env import require_docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]
IMAGE = "fgpu/busybox:latest"


def _session(stack: Stack, *args: str, key: str | None = None) -> dict[str, object]:
    """A session run to its end with ``args`` (mounts, then ``--`` and its command)."""
    create = ["session", "create", "--image", IMAGE, "--cpu-only", "--cpu", "0.5", "--mem", "64m"]
    [sid] = stack.json(*create, *args, key=key)["sessions"]
    waited = stack.json("session", "wait", sid, "--for", "ended", "--timeout", "60", key=key)
    [session] = waited["sessions"]
    return dict(session)


def _gone(path: Path, deadline_s: float) -> bool:
    return _within(deadline_s, lambda: not path.exists())


def _within(deadline_s: float, done: Callable[[], bool]) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if done():
            return True
        time.sleep(0.05)
    return False


class _Http:
    """The storage routes as ``researcher``, over plain HTTP (what the CLI will not do:
    hang up within an upload)."""

    def __init__(self, stack: Stack) -> None:
        url = urlsplit(json.loads((stack.home / "up.json").read_text())["api_url"])
        self.host, self.port = str(url.hostname), int(url.port or 80)
        keys = stack.command_env()
        body = {"access_key": keys["FGPU_ACCESS_KEY"], "secret_key": keys["FGPU_SECRET_KEY"]}
        status, answer = self.call("POST", "/v1/auth/token", json.dumps(body).encode())
        assert status == 200, answer
        self.token = answer["token"]

    def call(self, method: str, target: str, body: bytes | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"Content-Type": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request(method, target, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    @contextmanager
    def broken_upload(self, folder: str, path: str, sent: bytes, length: int) -> Iterator[None]:
        """An upload of ``length`` bytes into ``path`` that sends ``sent`` and hangs up
        when the block ends."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        conn.putrequest("PUT", f"/v1/vfolders/{folder}/files/{path}")
        conn.putheader("Authorization", f"Bearer {self.token}")
        conn.putheader("Content-Length", str(length))
        conn.endheaders()
        conn.send(sent)
        try:
            yield
        finally:
            conn.close()

    def partial(self, folder: str, path: str) -> int | None:
        status, answer = self.call("GET", f"/v1/vfolders/{folder}/stat?path={path}")
        assert status == 200, answer
        found: int | None = answer["partial"]
        return found


def _nothing_open_to_others(root: Path) -> None:
    """The folders' root and every storage host's and folder's directory are 0700 and the
    storage uid's (not root's); what that uid wrote beneath has no bit for anyone else.
    (What sessions wrote as root is theirs; nobody else on the host gets past the 0700.)"""
    st = root.stat()
    assert st.st_uid != 0 and stat.S_IMODE(st.st_mode) == 0o700
    owner = (st.st_uid, st.st_gid)
    tops = [h for h in root.iterdir()] + [f for h in root.iterdir() for f in h.iterdir()]
    assert tops
    for d in tops:
        s = d.lstat()
        assert ((s.st_uid, s.st_gid), stat.S_IMODE(s.st_mode)) == (owner, 0o700), d
    for path in root.rglob("*"):
        s = path.lstat()
        if s.st_uid == owner[0]:
            assert s.st_mode & 0o077 == 0, (path, oct(s.st_mode))


def test_a_folder_from_upload_through_a_session_to_download_and_the_trash(
    tmp_path: Path,
) -> None:
    require_docker()
    payload = os.urandom(300_000)
    (tmp_path / "in.bin").write_bytes(payload)
    with fgpu_up(tmp_path / "home", users=("researcher", "mallory")) as stack:
        made = stack.json("vfolder", "create", "data", "--quota", "1m")
        vfolder_id = made["id"]
        top = stack.home / "vfolders" / "local" / vfolder_id
        done = stack.json("vfolder", "upload", "data", str(tmp_path / "in.bin"))
        assert (done["size"], done["folder_bytes"]) == (300_000, 300_000)

        # An upload broken off leaves nothing at its path: what came waits aside, and
        # the upload goes on from there.
        web = _Http(stack)
        with web.broken_upload(vfolder_id, "big.bin", payload[:123_456], len(payload)):
            assert _within(30, lambda: web.partial(vfolder_id, "big.bin") == 123_456)
        assert not (top / "big.bin").exists()
        again = stack.run("vfolder", "upload", "data", str(tmp_path / "in.bin"), "big.bin")
        assert again.returncode == 1 and "--resume" in again.stderr
        resumed = ["vfolder", "upload", "data", str(tmp_path / "in.bin"), "big.bin", "--resume"]
        assert stack.json(*resumed)["size"] == 300_000
        assert (top / "big.bin").read_bytes() == payload
        assert sorted(p.name for p in top.iterdir()) == ["big.bin", "in.bin"]

        # The quota: 600,000 bytes held, 1 MiB allowed.
        (tmp_path / "huge.bin").write_bytes(b"h" * 500_000)
        refused = stack.run("vfolder", "upload", "data", str(tmp_path / "huge.bin"))
        assert refused.returncode == 1
        assert "allows 1048576 bytes; it holds 600000" in refused.stderr
        assert not (top / "huge.bin").exists()

        # A session mounts it, reads the file and writes copies (as root, keeping the
        # upload's 0600): the one it gives to the folder's owner comes back; the other is
        # refused, saying why, and removed.
        cd = "cd /home/work/data && "
        copy = cd + "cp in.bin copy.bin && chown $(stat -c %u:%g .) copy.bin && cp in.bin root.bin"
        s = _session(stack, "--mount", "data", "--", "sh", "-c", copy)
        assert (s["status"], s["exit_code"]) == ("TERMINATED", 0), s
        assert s["mounts"] == [{"name": "data", "read_only": False, "at": None}]
        assert "data at /home/work/data (rw)" in stack.fgpu("session", "info", s["id"])
        stack.fgpu("vfolder", "download", "data", "copy.bin", str(tmp_path / "copy.bin"))
        assert (tmp_path / "copy.bin").read_bytes() == payload
        refused = stack.run("vfolder", "download", "data", "root.bin", str(tmp_path / "r.bin"))
        assert refused.returncode == 1 and "did a session make it as another" in refused.stderr
        assert stack.json("vfolder", "rm-file", "data", "root.bin")["kind"] == "file"
        # A download broken off goes on from what arrived (a Range request).
        part = tmp_path / "part.bin"
        part.write_bytes(payload[:1000])
        kept = stack.run("vfolder", "download", "data", "in.bin", str(part))
        assert kept.returncode == 1 and "--resume" in kept.stderr
        stack.fgpu("vfolder", "download", "data", "in.bin", str(part), "--resume")
        assert part.read_bytes() == payload
        done_already = stack.fgpu("vfolder", "download", "data", "in.bin", str(part), "--resume")
        assert "complete already" in done_already and part.read_bytes() == payload
        files = {e["name"] for e in stack.json("vfolder", "ls-files", "data")}
        assert files == {"in.bin", "big.bin", "copy.bin"}

        # Renamed and removed in place.
        moved = stack.json("vfolder", "mv-file", "data", "big.bin", "again.bin")
        assert moved == {"path": "big.bin", "to": "again.bin"}
        removed = stack.json("vfolder", "rm-file", "data", "again.bin")
        assert (removed["kind"], removed["folder_bytes"]) == ("file", 600_000)
        refused = stack.run("vfolder", "rm-file", "data", "again.bin")
        assert refused.returncode == 1 and "no 'again.bin'" in refused.stderr

        # Another user: it is not theirs to see, list or mount.
        assert stack.json("vfolder", "ls", key="mallory") == []
        listed = stack.run("vfolder", "ls-files", vfolder_id, key="mallory")
        assert listed.returncode != 0 and "no folder" in listed.stderr
        s = _session(stack, "--mount", vfolder_id, "--", "true", key="mallory")
        assert s["status"] == "REJECTED"
        assert s["reason"] == f"user mallory has no folder '{vfolder_id}' (or may not use it)"

        # Shared read-only: mallory reads it, and may not write it; until unshared.
        stack.fgpu("vfolder", "share", "data", "--user", "mallory")
        [seen] = stack.json("vfolder", "ls", key="mallory")
        assert (seen["id"], seen["access"]) == (vfolder_id, "ro")
        got = tmp_path / "by-mallory.bin"
        stack.fgpu("vfolder", "download", "data", "in.bin", str(got), key="mallory")
        assert got.read_bytes() == payload
        written = stack.run("vfolder", "upload", "data", str(got), "m.bin", key="mallory")
        assert written.returncode == 1 and "may not write folder data" in written.stderr
        for change in (["rm-file", "data", "in.bin"], ["mv-file", "data", "in.bin", "m.bin"]):
            refused = stack.run("vfolder", *change, key="mallory")
            assert refused.returncode == 1 and "may not write folder data" in refused.stderr
        stack.fgpu("vfolder", "unshare", "data", "--user", "mallory")
        assert stack.json("vfolder", "ls", key="mallory") == []

        _nothing_open_to_others(stack.home / "vfolders")

        # The trash: its owner moves it there, only an administrator empties it.
        stack.fgpu("vfolder", "rm", "data")
        assert stack.json("vfolder", "ls") == []
        assert top.exists()
        refused = stack.run("vfolder", "trash", "empty", "data")
        assert refused.returncode == 1 and "may not empty the trash" in refused.stderr
        stack.fgpu("vfolder", "trash", "empty", key="admin")
        assert _gone(top, 30)
