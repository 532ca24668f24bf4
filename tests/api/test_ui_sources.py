"""The web UI's own files are well formed: every ES module parses (``node --check``, where
node is installed: the browser tests would otherwise fail on a blank page, far from the
cause), every page element that holds others is closed where it opened, and no id is
given twice (a script's ``querySelector("#x")`` finds only the first)."""

import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from services.api import ui

UI = Path(ui.__file__).with_name("ui")
OWN_MODULES = sorted(n for n in ui.ASSETS if n.endswith(".js") and not n.startswith("vendor/"))
# Elements that hold others; void and inline ones carry no structure worth checking.
_BLOCKS = {"main", "section", "div", "form", "table", "thead", "tbody", "dialog", "header"}


class _Structure(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, tuple[int, int]]] = []
        self.problems: list[str] = []
        self.ids: Counter[str] = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.update(v for k, v in attrs if k == "id" and v)
        if tag in _BLOCKS:
            self.open.append((tag, self.getpos()))

    def handle_endtag(self, tag: str) -> None:
        if tag not in _BLOCKS:
            return
        if not self.open or self.open[-1][0] != tag:
            opened = self.open[-1] if self.open else None
            self.problems.append(f"</{tag}> at {self.getpos()} closes {opened}")
            return
        self.open.pop()


@pytest.mark.parametrize("name", OWN_MODULES)
def test_every_module_parses(name: str) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on this machine")
    source = (UI / name).read_text()
    done = subprocess.run(
        [node, "--check", "--input-type=module"],
        input=source,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_the_page_closes_what_it_opens_and_names_each_id_once() -> None:
    page = _Structure()
    page.feed((UI / "index.html").read_text())
    page.close()
    assert page.problems == []
    assert page.open == []
    assert [i for i, n in page.ids.items() if n > 1] == []


def test_the_structure_check_can_fail() -> None:
    page = _Structure()
    page.feed('<section id="a"><div id="a"><p>x</p></section>')
    assert page.problems and page.ids["a"] == 2
