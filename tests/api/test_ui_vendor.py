"""The web UI's third-party files (services/api/ui/vendor/, copied from npm by ``make
web``) are what package-lock.json names: each file's digest is its manifest's, each
manifest entry's package version and integrity the lockfile's; and the page loads them
from this host only."""

import hashlib
import json
from pathlib import Path

from services.api import ui

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "services" / "api" / "ui" / "vendor"


def test_the_vendor_files_are_the_lockfiles() -> None:
    manifest = json.loads((VENDOR / "MANIFEST.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())["packages"]
    package = json.loads((ROOT / "package.json").read_text())["dependencies"]
    assert {f"vendor/{name}" for name in manifest} == {n for n in ui.ASSETS if "vendor/" in n}
    for name, entry in manifest.items():
        digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
        assert digest == entry["sha256"], f"{name} changed: run make web"
        locked = lock[f"node_modules/{entry['package']}"]
        assert (entry["version"], entry["integrity"]) == (locked["version"], locked["integrity"])
        assert package[entry["package"]] == entry["version"]  # pinned exactly


def test_the_page_loads_nothing_from_elsewhere() -> None:
    for name in ui.ASSETS:
        text = (VENDOR.parent / name).read_text()
        for line in text.splitlines():
            if "import" in line and "from" in line and line.lstrip().startswith("import"):
                assert '"./' in line or "'./" in line, (name, line)
        assert "https://cdn" not in text and "//unpkg" not in text, name
