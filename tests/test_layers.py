"""Imports go one way: events -> domain -> ports -> actors -> adapters -> entry points.

Every module of our packages falls under exactly one rule, which names the packages of
ours it may import and the libraries it may not: actors never touch an adapter library
(nats, aiodocker, duckdb, pynvml), so the fakes that implement the same Protocols stand in
for tests. Relative imports are refused: a module's layer must show in its imports. The
checker itself is tested on modules written to break each rule, so it can fail.
"""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("events", "services", "projections", "gpu_shim")
PACKAGES = ("events", "services", "projections", "gpu_shim")

# Libraries that reach outside the process (the bus, the engine, files, GPUs) or that serve
# users (HTTP, the terminal): only adapters and entry points use them.
EDGE = frozenset(
    {"nats", "aiodocker", "aiohttp", "duckdb", "pyarrow", "pynvml", "fastapi", "starlette"}
    | {"uvicorn", "httpx", "typer", "rich", "click"}
)


@dataclass(frozen=True)
class Rule:
    """What the modules under ``prefix`` may import: packages of ours, and edge libraries."""

    prefix: str
    ours: tuple[str, ...]
    edge: frozenset[str] = frozenset()


_INNER = ("events", "services.domain", "services.ports")
_WIRING = "services.wiring"
RULES = (
    Rule("events", ("events",)),
    Rule("services.domain", ("events", "services.domain")),
    Rule("services.ports", _INNER),
    Rule("services.actors", (*_INNER, "services.actors")),
    Rule("services.client", (*_INNER, "services.actors")),
    Rule("services.testing", (*_INNER, "services.testing")),
    # Simulations drive the real actors on the in-memory log or a log they are given.
    Rule(
        "services.sim", (*_INNER, "services.actors", "services.adapters.memory_log", "services.sim")
    ),
    Rule(
        "services.adapters",
        (*_INNER, "services.adapters", "gpu_shim"),  # the shim's reader is ours, at the edge
        frozenset({"nats", "aiodocker", "aiohttp", "pynvml"}),
    ),
    # The DuckDB adapter: no other adapter library, no entry point.
    Rule("projections", (*_INNER, "projections"), frozenset({"duckdb", "pyarrow"})),
    Rule(
        "services.api",
        (*_INNER, "projections", "services.api"),
        frozenset({"duckdb", "fastapi", "starlette", "uvicorn"}),
    ),
    # The stack's wiring: the actors on the adapters, and the read API; no entry point.
    Rule(
        "services.wiring",
        (*_INNER, "services.actors", "services.adapters", "projections", "services.api", _WIRING),
    ),
    # Entry points: anything.
    Rule("services.cli", OURS, EDGE),
    Rule("services", ()),  # the package's own __init__: nothing
    Rule("gpu_shim", ("gpu_shim",)),
)


def rule_of(module: str) -> Rule:
    """The most specific rule whose prefix is ``module`` or a package above it."""
    matching = [r for r in RULES if module == r.prefix or module.startswith(r.prefix + ".")]
    if not matching:
        raise LookupError(f"no layer rule covers {module}")
    return max(matching, key=lambda r: len(r.prefix))


def violations(module: str, source: str) -> list[str]:
    """What ``source``, the text of ``module``, imports against its rule."""
    rule = rule_of(module)
    out = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append(f"{module}: relative import from {'.' * node.level}{node.module or ''}")
                continue
            names = [node.module or ""]
        for name in names:
            top = name.split(".")[0]
            if top in OURS and not any(name == p or name.startswith(p + ".") for p in rule.ours):
                out.append(f"{module} imports {name}")
            if top in EDGE and top not in rule.edge:
                out.append(f"{module} imports the edge library {name}")
    return out


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "build" in path.relative_to(ROOT).parts:
                continue
            parts = [p for p in path.relative_to(ROOT).with_suffix("").parts if p != "__init__"]
            out.append((".".join(parts), path))
    return out


MODULES = _modules()


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_imports_go_one_way(module: str, path: Path) -> None:
    assert violations(module, path.read_text()) == []


def test_every_package_is_looked_at() -> None:
    seen = {m.split(".")[0] for m, _ in MODULES}
    assert seen == set(PACKAGES)
    layers = {rule_of(m).prefix for m, _ in MODULES}
    assert {"projections", "services.api", "services.adapters", "gpu_shim"} <= layers


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("events.x", "from services.domain import state", "events.x imports services.domain"),
        ("events.x", "import projections.store", "events.x imports projections.store"),
        ("services.domain.x", "from services.ports import Clock", "imports services.ports"),
        ("services.domain.x", "import nats", "imports the edge library nats"),
        ("services.ports.x", "from services.actors import common", "imports services.actors"),
        ("services.actors.x", "from services.adapters import jetstream", "imports services."),
        ("services.actors.x", "def f():\n    import duckdb\n", "edge library duckdb"),
        ("services.client", "from services.cli import options", "imports services.cli"),
        ("projections.x", "from services.api import app", "imports services.api"),
        ("projections.x", "from services.cli.main import app", "imports services.cli.main"),
        ("projections.x", "import nats.errors", "edge library nats.errors"),
        ("services.api.x", "from services.cli import stack", "imports services.cli"),
        ("services.adapters.x", "import duckdb", "edge library duckdb"),
        ("gpu_shim.x", "from events import encode", "imports events"),
        ("services.actors.x", "from . import common", "relative import from ."),
        ("projections.x", "from .store import Batch", "relative import from .store"),
    ],
)
def test_the_rule_can_fail(module: str, source: str, found: str) -> None:
    assert any(found in v for v in violations(module, source)), violations(module, source)


def test_entry_points_may_import_anything() -> None:
    source = (
        "import duckdb, typer\nfrom services.adapters import jetstream\nfrom projections import x"
    )
    assert violations("services.cli.x", source) == []


def test_a_module_outside_every_rule_is_an_error() -> None:
    with pytest.raises(LookupError):
        rule_of("elsewhere.module")


def _touches_the_client(source: str) -> list[str]:
    """Where ``source`` imports the NATS client or reaches into a log's client (``.nc``,
    ``.js``) instead of going through the ports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            found += [f"imports {n}" for n in names if n.split(".")[0] == "nats"]
        elif isinstance(node, ast.Attribute) and node.attr in ("nc", "js"):
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


CLI_MODULES = [(m, p) for m, p in MODULES if m.startswith("services.cli")]


@pytest.mark.parametrize(("module", "path"), CLI_MODULES, ids=[m for m, _ in CLI_MODULES])
def test_the_cli_never_touches_the_nats_client(module: str, path: Path) -> None:
    """Heartbeats, agent requests and the log all go through ports (services.ports)."""
    assert _touches_the_client(path.read_text()) == []


def test_reaching_into_the_client_is_caught() -> None:
    assert _touches_the_client("await conn.log.nc.request('x', b'')") == ["line 1: .nc"]
    assert _touches_the_client("import nats.errors") == ["imports nats.errors"]
