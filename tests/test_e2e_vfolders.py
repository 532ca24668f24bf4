"""Virtual folders through the `fgpu` command, on `fgpu up` with real Docker: a folder is
created, a file uploaded (a broken upload resumed, and a broken download), a session
mounts it and copies the file, the copy is downloaded; the quota refuses a file too big;
another user neither sees nor mounts it until it is shared read-only, then reads it and
may not write it; it goes to the trash, which only an administrator empties."""

import os
import time
from pathlib import Path

import pytest
from cli_stack import Stack, fgpu_up
from docker_env import require_docker

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
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not path.exists():
            return True
        time.sleep(0.05)
    return False


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

        # An upload broken off leaves what came: it goes on from there, and nothing that
        # exists is replaced unless asked.
        (top / "big.bin").write_bytes(payload[:123_456])
        again = stack.run("vfolder", "upload", "data", str(tmp_path / "in.bin"), "big.bin")
        assert again.returncode == 1 and "--resume" in again.stderr
        resumed = ["vfolder", "upload", "data", str(tmp_path / "in.bin"), "big.bin", "--resume"]
        assert stack.json(*resumed)["size"] == 300_000
        assert (top / "big.bin").read_bytes() == payload

        # The quota: 600,000 bytes held, 1 MiB allowed.
        (tmp_path / "huge.bin").write_bytes(b"h" * 500_000)
        refused = stack.run("vfolder", "upload", "data", str(tmp_path / "huge.bin"))
        assert refused.returncode == 1
        assert "allows 1048576 bytes; it holds 600000" in refused.stderr
        assert not (top / "huge.bin").exists()

        # A session mounts it, reads the file and writes a copy; the copy comes back.
        copy = "cp /home/work/data/in.bin /home/work/data/copy.bin"
        s = _session(stack, "--mount", "data", "--", "sh", "-c", copy)
        assert (s["status"], s["exit_code"]) == ("TERMINATED", 0), s
        assert s["mounts"] == [{"name": "data", "read_only": False}]
        assert "data at /home/work/data (rw)" in stack.fgpu("session", "info", s["id"])
        stack.fgpu("vfolder", "download", "data", "copy.bin", str(tmp_path / "copy.bin"))
        assert (tmp_path / "copy.bin").read_bytes() == payload
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
        stack.fgpu("vfolder", "unshare", "data", "--user", "mallory")
        assert stack.json("vfolder", "ls", key="mallory") == []

        # The trash: its owner moves it there, only an administrator empties it.
        stack.fgpu("vfolder", "rm", "data")
        assert stack.json("vfolder", "ls") == []
        assert top.exists()
        refused = stack.run("vfolder", "trash", "empty", "data")
        assert refused.returncode == 1 and "may not empty the trash" in refused.stderr
        stack.fgpu("vfolder", "trash", "empty", key="admin")
        assert _gone(top, 30)
