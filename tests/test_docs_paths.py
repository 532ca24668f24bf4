"""Every file of the repository the docs name exists: a path in backticks under one of the
repository's folders (README.md, docs/, gpu_shim/README.md), or a module's attribute
written as ``services/x/y.name`` (the module ``services/x/y.py``). Docs that cite what
is gone send a newcomer looking for nothing."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("services", "projections", "events", "tests", "bench", "scripts", "gpu_shim", "docs")
FOLDERS += (".ci",)
CITED = re.compile(r"`((?:" + "|".join(re.escape(f) for f in FOLDERS) + r")/[\w./-]+?)(?::\d+)?`")


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "gpu_shim/README.md"]


def cited(text: str) -> list[tuple[int, str]]:
    """The repository paths ``text`` names in backticks, with their line numbers."""
    return [
        (n, m.group(1).rstrip("."))
        for n, line in enumerate(text.splitlines(), start=1)
        for m in CITED.finditer(line)
    ]


def exists(path: str, root: Path = ROOT) -> bool:
    if (root / path).exists():
        return True
    module, dot, _attr = path.rpartition(".")
    return bool(dot) and "/" in module and (root / f"{module}.py").exists()


def test_the_docs_name_only_files_that_exist() -> None:
    missing = [
        f"{doc.relative_to(ROOT)}:{n}: {path}"
        for doc in _docs()
        for n, path in cited(doc.read_text())
        if not exists(path)
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("see `services/actors/quota.py`", True),
        ("`services/actors/common.follow_log` does it", True),
        ("`services/actors/gone.py:12`", False),
        ("`tests/test_nothing_here.py`", False),
        ("`docs/nowhere.md`", False),
    ],
)
def test_a_path_that_is_gone_is_found(text: str, found: bool) -> None:
    [(_, path)] = cited(text)
    assert exists(path) is found
