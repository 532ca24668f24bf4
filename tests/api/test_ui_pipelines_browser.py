"""The Pipelines page in a real headless browser: a user lists its own runs only (not
another user's) and opens one, whose DAG is drawn as boxes in dependency order, each
with its state; nothing the page's Content-Security-Policy refuses. A screenshot is
saved and its path printed."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from events import PipelineSpec, PipelineTask, Slots
from tests.support.browser import browser_or_skip, chrome
from tests.support.ui_pages import PipelinesPage
from tests.support.ui_world import UiWorld, ui_world

SMALL = Slots(cpu=100, mem=1 << 26)


def _spec(*names: str) -> PipelineSpec:
    """A chain of tasks, each after the one before."""
    tasks = [
        PipelineTask(
            name=n,
            image="fgpu/busybox:latest",
            command=("true",),
            slots=SMALL,
            dependencies=(names[i - 1],) if i else (),
        )
        for i, n in enumerate(names)
    ]
    return PipelineSpec(name="demo", tasks=tuple(tasks))


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-pipelines-browser")) as world:
        yield world


def test_a_user_sees_its_own_runs_and_one_runs_dag(w: UiWorld, tmp_path: Path) -> None:
    browser_or_skip()
    mine = w.pipeline_run("alice", _spec("prepare", "train", "evaluate"))
    others = w.pipeline_run("bob", _spec("x"))
    driver = chrome(tmp_path, 1200, 800)
    try:
        page = PipelinesPage(driver, f"{w.url}/")
        page.sign_in(*w.keys["alice"], "alice")
        page.watch_csp()
        assert page.open_list() == [mine]  # not bob's
        assert others != mine
        drawn = page.open_run(mine)
        # No pipeline actor here: the run is asked for, its tasks wait.
        assert drawn == [("prepare", "waiting"), ("train", "waiting"), ("evaluate", "waiting")]
        assert not page.shown("#launch")  # the page is the runs', not the launch form's
        shot = tmp_path / "ui-pipeline.png"
        driver.save_screenshot(str(shot))
        assert page.csp_refusals() == []
        page.sign_out()
    finally:
        driver.quit()
    print(f"\nui screenshot: {shot}")
