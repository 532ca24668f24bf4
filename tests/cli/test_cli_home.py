"""What the CLI keeps in ``$FGPU_HOME`` is its user's only: a home it makes is 0700, the
files it writes 0600 (even in place of a file that was not), and a command that sets its
umask for the block gives the process its own back. (``test_e2e_cli.py`` walks the home
of a whole ``fgpu up`` run.)"""

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.home import private_dir, private_files, write_private
from services.cli.main import app


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_home_made_by_login_and_what_it_writes_are_the_users_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "a" / "home"
    monkeypatch.setenv("FGPU_HOME", str(home))
    result = CliRunner().invoke(
        app, ["login", "--access-key", "AKsomeone", "--secret-stdin"], input="s3cret\n"
    )
    assert result.exit_code == 0, result.output
    assert (_mode(tmp_path / "a"), _mode(home)) == (0o700, 0o700)
    assert [(p.name, _mode(p)) for p in home.iterdir()] == [("credentials", 0o600)]


def test_a_private_file_replaces_one_that_was_not(tmp_path: Path) -> None:
    path = tmp_path / "up.json"
    path.write_text("{}")
    path.chmod(0o644)
    write_private(path, '{"pid": 1}')
    assert (path.read_text(), _mode(path)) == ('{"pid": 1}', 0o600)
    assert [p.name for p in tmp_path.iterdir()] == ["up.json"]  # no temporary left


def test_a_private_dir_leaves_what_was_there(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    private_dir(tmp_path / "x" / "y")
    assert [_mode(p) for p in (tmp_path, tmp_path / "x", tmp_path / "x" / "y")] == [
        0o755,
        0o700,
        0o700,
    ]


def test_a_block_of_private_files_gives_the_umask_back(tmp_path: Path) -> None:
    before = os.umask(0o022)
    try:
        with private_files():
            (tmp_path / "made").write_text("x")
            (tmp_path / "dir").mkdir()
        (tmp_path / "after").write_text("x")
        assert [_mode(tmp_path / n) for n in ("made", "dir", "after")] == [0o600, 0o700, 0o644]
    finally:
        os.umask(before)
