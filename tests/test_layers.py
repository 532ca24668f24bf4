"""Imports go one way: events -> domain/ports -> actors -> adapters -> entry points.

Actors never touch an adapter library (nats, aiodocker, duckdb, pynvml): they depend on
the ports, so the fakes that implement the same Protocols can stand in for tests.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EDGE_LIBRARIES = {"nats", "aiodocker", "aiohttp", "duckdb", "pynvml"}

# package prefix -> prefixes of our own packages it may import
ALLOWED = {
    "events": ("events",),
    "services.ports": ("events", "services.ports"),
    "services.domain": ("events", "services.ports", "services.domain"),
    "services.actors": ("events", "services.ports", "services.domain", "services.actors"),
    "services.client": ("events", "services.ports", "services.domain", "services.actors"),
    "services.testing": ("events", "services.ports", "services.domain", "services.testing"),
}
OURS = ("events", "services", "projections", "gpu_shim")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in ("events", "services"):
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out.append((".".join(parts), path))
    return out


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda x: str(x))
def test_imports_go_one_way(module: str, path: Path) -> None:
    rule = next((allowed for prefix, allowed in ALLOWED.items() if module.startswith(prefix)), None)
    if rule is None:
        return  # adapters and entry points may import anything of ours
    for name in _imports(path):
        if name.startswith(OURS):
            assert name.startswith(rule), f"{module} imports {name}"
        assert name.split(".")[0] not in EDGE_LIBRARIES, f"{module} imports {name}"
