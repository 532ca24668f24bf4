"""A full disk, on a real small filesystem (a 64 MiB tmpfs: root only, skipped otherwise):
the cluster says so and writes again by itself once there is room.

What nats-server 2.15.1 does, and these tests hold it to: a write its store fails for want
of room is answered nothing at all (the publisher's request times out), and every write
of that store fails from then on, room or not, until the server starts again; an atomic
batch cut off by the full disk is finished when the server starts again with room.
"""

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from events import SessionRequested, Slots
from events import subjects as subj
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.adapters.nats_supervisor import SupervisedServer
from services.domain.provenance import Provenance, stamp
from services.ports import LogError, OutcomeUnknown
from tests.support.cli_stack import FGPU, Stack, fgpu_up

GIB = 1 << 30
CREATE = ["session", "create", "--image", "fgpu/busybox:latest", "--fgpu", "0.01"]
CREATE += ["--cpu", "0.01", "--mem", "1m"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB filesystem of the test's own."""
    if os.geteuid() != 0:
        pytest.skip("a small filesystem (tmpfs) is mounted as root only")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path, leave: int = 0) -> Path:
    """A file taking all the room on ``disk`` but ``leave`` bytes."""
    filler = disk / "filler"
    room = shutil.disk_usage(disk).free - leave
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        while room > 0:
            f.write(b"\0" * min(room, 1 << 20))
            room -= 1 << 20
    return filler


def _request(n: int) -> tuple[str, SessionRequested]:
    e = stamp(
        SessionRequested,
        Provenance("AKana", datetime.now(UTC)),
        session_id=f"s{n}",
        owner="AKana",
        image="fgpu/busybox:latest",
        command=("x" * 2000,),  # a few KiB each: a batch of them takes room
        slots=Slots(cpu=100, mem=GIB, fgpu=25),
    )
    return subj.request("AKana", f"s{n}"), e


@pytest.mark.anyio
@pytest.mark.parametrize("leave", [0, 300_000])
async def test_a_batch_cut_off_by_a_full_disk_is_all_or_none_once_the_server_restarts(
    small_disk: Path, leave: int
) -> None:
    """With no room the batch is refused; with room for part of it the server stores part,
    answers nothing, and finishes it when it starts again. A write on a full disk is
    answered nothing; the server says why in its log, fails every write after, and
    writes again once started again (the same port, the same store)."""
    server = nats_server.start(str(small_disk / "store"))
    supervised = SupervisedServer(server)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(supervised.follow)
            log = await connect(server.url)
            await log.create_or_update_stream()
            await log.append_many([_request(n) for n in range(3)])
            filler = _fill(small_disk, leave)
            batch = [_request(n) for n in range(100, 200)]
            try:
                await log.append_batch(
                    batch, expect_subject=batch[0][0], expected_last_subject_seq=0
                )
            except OutcomeUnknown:
                pass  # cut off: no answer at all
            except LogError:  # refused whole: the next write finds the disk full
                with pytest.raises(OutcomeUnknown):
                    await log.append(*_request(50))
            else:
                raise AssertionError("a batch was stored on a full disk")
            with anyio.fail_after(10):
                said = await supervised.write_failed()
            assert "no space left on device" in said
            filler.unlink()
            port = server.port
            await supervised.restart()
            assert server.port == port and supervised.write_error() is None
            with anyio.fail_after(30):
                while True:
                    try:
                        await log.append(*_request(999))
                        break
                    except LogError:
                        await anyio.sleep(0.1)  # the client reconnects
            stored = [r.subject async for b in log.read(0) for r in b]
            await log.close()
            tg.cancel_scope.cancel()
    finally:
        server.stop()
    of_batch = [s for s in stored if s in {subject for subject, _ in batch}]
    assert len(of_batch) in (0, len(batch)), f"{len(of_batch)} of the batch stored"
    assert stored[:3] == [subj.request("AKana", f"s{n}") for n in range(3)]
    assert stored[-1] == subj.request("AKana", "s999")


def _status(stack: Stack) -> dict[str, Any]:
    found: dict[str, Any] = stack.json("status", key="admin")
    return found


def _wait_state(stack: Stack, state: str, deadline_s: float = 30) -> dict[str, Any]:
    """The log's health once ``fgpu status`` says ``state`` (the watcher looks every
    second)."""
    end = time.monotonic() + deadline_s
    while True:
        [log] = _status(stack)["log"]
        if log["state"] == state:
            return dict(log)
        assert time.monotonic() < end, f"the log's state stayed {log}"
        time.sleep(0.2)


def _events(stack: Stack) -> list[dict[str, Any]]:
    lines = stack.fgpu("events", "--json", key="admin").splitlines()
    return [json.loads(line) for line in lines]


def test_a_full_disk_is_said_and_the_stack_writes_again_by_itself(
    small_disk: Path, tmp_path: Path
) -> None:
    store = small_disk / "store"
    up = ("--runtime", "dummy", "--store", str(store), "--low-space", "10%")
    with fgpu_up(tmp_path / "home", *up, keep_containers=True) as stack:
        # Who may see the stack's status: superadmins only.
        refused = stack.run("status")
        assert refused.returncode == 1
        assert refused.stderr == "error: only a superadmin may see the stack's status\n"
        assert _status(stack)["ok"] is True
        assert "all is well" in stack.fgpu("status", key="admin")

        # Under the watermark: new sessions are refused, with the reason, on the log.
        filler = _fill(small_disk, leave=2 << 20)
        low = _wait_state(stack, "low")
        assert str(low["reason"]).startswith("the log's disk is low: ")
        p = stack.run(*CREATE, "--wait", "--", "true")
        assert p.returncode == 1 and "the log's disk is low" in p.stderr, p.stderr

        # Full: the request's outcome is unknown, and said with its cause.
        filler.unlink()
        filler = _fill(small_disk)
        p = stack.run(*CREATE, "--count", "20", "--request-id", "full-1", "--", "true")
        assert p.returncode == 1, p.stdout
        [line] = p.stderr.splitlines()
        assert line.startswith("error: outcome unknown (")
        assert f"the log's disk is full: 0 bytes free at {store}" in line
        assert line.endswith("): retry with --request-id full-1")
        full = _wait_state(stack, "full")
        assert full["unwritable_since"] is not None
        assert "NOT WELL" in stack.fgpu("status", key="admin")

        # Room again: the stack writes again by itself, and the request, sent again, is
        # done once, all of it.
        filler.unlink()
        deadline = time.monotonic() + 30
        while (p := stack.run(*CREATE, "--count", "20", "--request-id", "full-1")).returncode:
            assert time.monotonic() < deadline, p.stderr
        ids = p.stdout.split()
        again = stack.run(*CREATE, "--count", "20", "--request-id", "full-1")
        assert again.stdout.split() == ids and len(set(ids)) == 20
        _wait_state(stack, "ok")
        # The read API's projection follows the log: wait until it has the requests.
        deadline = time.monotonic() + 30
        while True:
            events = _events(stack)
            asked = [e["session_id"] for e in events if e["type"] == "session.requested.v1"]
            if set(ids) <= set(asked) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sorted(i for i in asked if i in ids) == sorted(ids)
        said = [e["data"] for e in events if e["type"] == "log.health.v1"]
        assert [h["state"] for h in said][-2:] == ["low", "ok"], said
        assert said[-1]["unwritable_since"] is not None


def test_fgpu_up_does_not_start_on_a_low_disk(small_disk: Path, tmp_path: Path) -> None:
    _fill(small_disk, leave=1 << 20)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FGPU_")}
    p = subprocess.run(
        [FGPU, "up", "--runtime", "dummy", "--store", str(small_disk / "store")],
        env={**env, "FGPU_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 1
    [line] = p.stderr.splitlines()
    assert line.startswith("error: the log's disk is low: ")
    assert line.endswith("free some room (or lower --low-space), then start again")
    assert not (small_disk / "store" / "nats-server.pid").exists()  # no server started
