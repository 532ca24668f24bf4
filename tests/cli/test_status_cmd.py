"""``fgpu status`` on a running ``fgpu up`` (dummy runtime): a superadmin sees the stack
at a glance, the actors' snapshots among it (their health and age, as ``fgpu admin
snapshots`` says them); anyone else is refused it."""

from collections.abc import Iterator

import pytest

from events import subjects as subj
from tests.support.cli_stack import Stack, fgpu_up


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("status") / "home"
    with fgpu_up(home, "--runtime", "dummy", "--no-shim", keep_containers=True) as up:
        yield up


def test_a_superadmin_sees_the_log_the_agents_and_each_snapshot(stack: Stack) -> None:
    found = stack.json("status", key="admin")
    assert found["ok"] is True, found
    assert found["agents"] == {"alive": 1, "lost": 0}
    [log] = found["log"]
    assert log["state"] == "ok" and log["live"] is True
    kinds = [(s["kind"], s["health"] in ("ok", "none")) for s in found["snapshots"]]
    assert kinds == [(kind, True) for kind in subj.SNAPSHOT_KINDS], found["snapshots"]
    shown = stack.fgpu("status", key="admin").splitlines()
    assert shown[0] == "all is well"
    assert [line.split()[1] for line in shown if line.startswith("snapshot ")] == list(
        subj.SNAPSHOT_KINDS
    )


def test_anyone_else_is_refused_the_status(stack: Stack) -> None:
    refused = stack.run("status")
    assert refused.returncode == 1
    assert refused.stderr == "error: only a superadmin may see the stack's status\n"
