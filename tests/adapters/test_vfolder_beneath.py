"""Paths resolved beneath a folder's directory, both ways (openat2, and the walk used where
the kernel has none): a link anywhere in a path is refused and never followed, by every
operation; a FIFO or a device node a session planted is never opened; an upload resumes
only a hidden file of its own; names and paths past the filesystem's limits are refused."""

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.adapters.vfolder_beneath import (
    MAX_DEPTH,
    Beneath,
    Refused,
    kernel_resolves,
    partial_name,
    parts,
)

AS_ROOT = os.geteuid() == 0


@pytest.fixture(params=["openat2", "walk"])
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Beneath, Path]]:
    """A folder's directory (``tmp/top``), open, and what lies around it: ``tmp/outside``
    holds ``secret.txt`` and the empty ``empty``."""
    top = tmp_path / "top"
    top.mkdir()
    outside = tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    (outside / "secret.txt").write_text("host secret")
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    kernel = request.param == "openat2"
    if kernel and not kernel_resolves(fd):
        os.close(fd)
        pytest.skip("this kernel resolves no path with openat2")
    try:
        yield Beneath(fd, kernel=kernel), top
    finally:
        os.close(fd)


def _refused(status: int, call: Callable[..., Any], *args: Any) -> str:
    with pytest.raises(Refused) as e:
        call(*args)
    assert e.value.status == status, (args, e.value.reason)
    return e.value.reason


def test_a_link_anywhere_in_a_path_is_refused_and_never_followed(
    folder: tuple[Beneath, Path],
) -> None:
    f, top = folder
    outside = top.parent / "outside"
    (top / "real").mkdir()
    (top / "real" / "secret.txt").write_text("a decoy of the folder's own")
    os.symlink(outside, top / "abs")  # as a session could, to the host's path
    os.symlink("../outside", top / "rel")
    os.symlink(outside, top / "real" / "inner")
    before = sorted(p.name for p in outside.iterdir())
    for d in ("abs", "rel", "real/inner"):
        assert "never followed" in _refused(403, f.open_read, f"{d}/secret.txt")
        _refused(403, f.stat, f"{d}/secret.txt")
        _refused(403, f.listing, d)
        _refused(403, f.listing, f"{d}/empty")
        _refused(403, f.upload, f"{d}/empty/planted.txt", 0, True)
        _refused(403, f.remove, f"{d}/secret.txt", False)
        _refused(403, f.remove, f"{d}/empty", True)
        _refused(403, f.move, f"{d}/secret.txt", "taken.txt", False)
        _refused(403, f.move, "real/secret.txt", f"{d}/empty/put.txt", False)
    # The last part a link: shown as one, removed as one, never opened.
    assert "is a link" in _refused(409, f.open_read, "abs")
    assert "is a link" in _refused(409, f.upload, "abs", 0, True)
    assert ("abs", "link") in {(n, k) for n, k, _, _ in f.listing("")}
    assert f.remove("abs", True) == "link" and not (top / "abs").exists()
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "secret.txt").read_text() == "host secret"
    assert list((outside / "empty").iterdir()) == []
    assert f.scan() == (len("a decoy of the folder's own"), 1)


def test_a_fifo_or_a_device_node_is_never_opened(folder: tuple[Beneath, Path]) -> None:
    f, top = folder
    os.mkfifo(top / "pipe")  # opened to read or write, with nobody at the other end, it blocks
    assert "not a file" in _refused(409, f.open_read, "pipe")
    _refused(409, f.upload, "pipe", 0, True)
    _refused(409, f.stat, "pipe")
    os.mkfifo(top / partial_name("up.bin"))  # planted where an upload writes
    _refused(409, f.upload, "up.bin", 4, False)
    up = f.upload("up.bin", 0, False)  # anew: what was there is unlinked, never opened
    os.write(up.fd, b"data")
    assert up.commit(False) == 4
    up.close()
    assert (top / "up.bin").read_bytes() == b"data"
    if AS_ROOT:  # /dev/null's numbers: opening it would succeed, and must not be tried
        os.mknod(top / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        assert "not a file" in _refused(409, f.open_read, "null")


def test_an_upload_resumes_only_its_own_hidden_file(folder: tuple[Beneath, Path]) -> None:
    f, top = folder
    up = f.upload("d/big.bin", 0, False)
    os.write(up.fd, b"0123")
    up.close()  # the client went away: kept aside
    assert f.stat("d/big.bin") == (None, 4)
    hidden = top / "d" / partial_name("big.bin")
    os.link(hidden, top / "d" / "a-second-name")  # a session links it elsewhere
    assert "someone else" in _refused(409, f.upload, "d/big.bin", 4, False)
    os.unlink(top / "d" / "a-second-name")
    if AS_ROOT:
        os.chown(hidden, 4242, 4242)  # or it is not this uid's any more
        assert f.stat("d/big.bin") == (None, None)
        assert "someone else" in _refused(409, f.upload, "d/big.bin", 4, False)
        os.chown(hidden, 0, 0)
    assert "resume at 4" in _refused(409, f.upload, "d/big.bin", 2, False)
    up = f.upload("d/big.bin", 4, False)
    os.write(up.fd, b"4567")
    assert up.commit(False) == 8
    up.close()
    assert (top / "d" / "big.bin").read_bytes() == b"01234567"
    assert sorted(p.name for p in (top / "d").iterdir()) == ["big.bin"]


def test_a_discarded_upload_leaves_the_folder_as_it_was(folder: tuple[Beneath, Path]) -> None:
    f, _ = folder
    up = f.upload("x.bin", 0, False)
    os.write(up.fd, b"abc")
    up.close()
    up = f.upload("x.bin", 3, False)
    os.write(up.fd, b"defg")
    up.discard()  # over the quota, say: back to the 3 bytes it resumed from
    up.close()
    assert f.stat("x.bin") == (None, 3)
    up = f.upload("x.bin", 0, False)
    up.discard()  # one started anew leaves nothing
    up.close()
    assert f.listing("") == []


@pytest.mark.parametrize(
    ("rel", "status"),
    [
        ("/etc/passwd", 400),
        ("a/../b", 400),
        ("a/./b", 400),
        ("a//b", 400),
        ("a\0b", 400),
        ("n" * 256, 400),
        ("d/" + "é" * 128, 400),
        ("/".join(["p" * 250] * 17), 414),
    ],
)
def test_paths_that_are_not_inside_or_too_long_are_refused(rel: str, status: int) -> None:
    _refused(status, parts, rel)


def test_names_at_the_limits_are_fine() -> None:
    assert parts("n" * 255) == ["n" * 255]
    assert parts("/".join(["p" * 250] * 16)) == ["p" * 250] * 16
    assert parts("a/b/") == ["a", "b"] and parts("") == []


def test_a_tree_deeper_than_the_limit_is_counted_to_it_and_refused_whole(
    folder: tuple[Beneath, Path],
) -> None:
    f, top = folder
    d = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(MAX_DEPTH + 4):  # by descriptor: the path would pass PATH_MAX
        os.mkdir("d", dir_fd=d)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=d)
        os.close(d)
        d = sub
    with open(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=d), "wb") as out:
        out.write(b"deep")
    os.close(d)
    (top / "shallow.txt").write_bytes(b"12")
    assert f.scan() == (2, 1)
    assert f"more than {MAX_DEPTH} directories deep" in _refused(409, f.remove, "d", True)
    assert f.remove("shallow.txt", False) == "file"
