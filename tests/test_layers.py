"""Imports go one way: events -> domain -> ports -> actors -> adapters -> entry points.

Every module of our packages falls under exactly one rule, which names the packages of
ours it may import and the libraries it may not: actors never touch an adapter library
(nats, aiodocker, duckdb, pynvml), so the fakes that implement the same Protocols stand in
for tests. Relative imports are refused: a module's layer must show in its imports. A
module named by a string in ``importlib.import_module("...")`` counts as imported. The
benchmarks (``bench/``) stand at the edge like the CLI: they may import any package of
ours and any library, and of the tests only their support kit (``tests.support``: a
running ``fgpu up``, the shim's fake drivers, what a bench measures against), never a
test module.

No import cycles: the graph of which module imports which, ``TYPE_CHECKING`` imports and
imports inside functions included, has none in any package of ours; and within
``services.domain`` the folders are layers too: collapsing each subpackage to one node and
the modules at its top to another, the graph still has none (the top serves all, and
``tenancy`` -> ``fold`` -> ``scheduling``, ``access`` go one way). The checkers themselves
are tested on modules written to break each rule, so they can fail.
"""

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("events", "services", "projections", "gpu_shim")
OURS = (*PRODUCT, "bench", "tests")
PACKAGES = (*PRODUCT, "bench")

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
    # Simulations drive the real actors on the in-memory log (or a log they are given),
    # in a virtual clock's time.
    Rule(
        "services.sim",
        (
            *_INNER,
            "services.actors",
            "services.adapters.memory_log",
            "services.adapters.virtual_clock",
            "services.sim",
        ),
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
    # The stack's wiring: the actors on the adapters, and the read API (with the user's
    # requests, ``services.client``, for the web UI's writes); no entry point.
    Rule(
        "services.wiring",
        (
            *_INNER,
            "services.actors",
            "services.adapters",
            "projections",
            "services.api",
            "services.client",
            _WIRING,
        ),
    ),
    # Entry points: anything.
    Rule("services.cli", OURS, EDGE),
    Rule("services", ()),  # the package's own __init__: nothing
    Rule("gpu_shim", ("gpu_shim",)),
    # Benchmarks: at the edge like the CLI (anything of the product), and the tests'
    # support kit, never a test module.
    Rule("bench", (*PRODUCT, "bench", "tests.support"), EDGE),
)


def rule_of(module: str) -> Rule:
    """The most specific rule whose prefix is ``module`` or a package above it."""
    matching = [r for r in RULES if module == r.prefix or module.startswith(r.prefix + ".")]
    if not matching:
        raise LookupError(f"no layer rule covers {module}")
    return max(matching, key=lambda r: len(r.prefix))


def imported(tree: ast.AST) -> Iterator[tuple[ast.AST, str, int]]:
    """Each import in ``tree``, wherever it stands (``TYPE_CHECKING`` blocks and function
    bodies included): the node, the module name and its relative level. A
    ``from a import b`` yields ``a`` and, for each ``b``, ``a.b`` marked level -1 (a
    submodule if there is one, else a name of ``a``). ``importlib.import_module("a.b")``
    with a literal name yields ``a.b``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node, node.module or "", node.level
            if not node.level:
                for a in node.names:
                    yield node, f"{node.module}.{a.name}", -1
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield node, arg.value, 0


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id == "import_module"


def violations(module: str, source: str) -> list[str]:
    """What ``source``, the text of ``module``, imports against its rule."""
    rule = rule_of(module)
    out = []
    for node, name, level in imported(ast.parse(source)):
        if level == -1:
            continue  # ``from a import b``: judged by ``a``
        if level:
            assert isinstance(node, ast.ImportFrom)
            out.append(f"{module}: relative import from {'.' * level}{node.module or ''}")
            continue
        top = name.split(".")[0]
        if top in OURS and not any(name == p or name.startswith(p + ".") for p in rule.ours):
            out.append(f"{module} imports {name}")
        if top in EDGE and top not in rule.edge:
            out.append(f"{module} imports the edge library {name}")
    return out


def _modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> list[tuple[str, Path]]:
    out = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            if "build" in path.relative_to(root).parts:
                continue
            parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
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
    assert {"projections", "services.api", "services.adapters", "gpu_shim", "bench"} <= layers


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("events.x", "from services.domain.fold import state", "events.x imports services.domain"),
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
        ("events.x", "importlib.import_module('services.api')", "events.x imports services.api"),
        ("services.domain.x", "import_module('duckdb')", "imports the edge library duckdb"),
        ("bench.x", "from tests.cluster import start", "bench.x imports tests.cluster"),
        ("bench.x", "import tests.api_world", "bench.x imports tests.api_world"),
    ],
)
def test_the_rule_can_fail(module: str, source: str, found: str) -> None:
    assert any(found in v for v in violations(module, source)), violations(module, source)


def test_entry_points_may_import_anything() -> None:
    source = (
        "import duckdb, typer\nfrom services.adapters import jetstream\nfrom projections import x"
    )
    assert violations("services.cli.x", source) == []
    assert violations("bench.x", source + "\nfrom services.cli import main") == []
    assert violations("bench.x", "from tests.support.cli_stack import fgpu_up") == []


def test_a_module_outside_every_rule_is_an_error() -> None:
    with pytest.raises(LookupError):
        rule_of("elsewhere.module")


def import_graph(modules: list[tuple[str, Path]]) -> dict[str, set[str]]:
    """Module -> the modules among ``modules`` it imports. ``from a import b`` reaches the
    submodule ``a.b`` where there is one, else ``a``; a parent package's ``__init__`` run on
    the way to a submodule is not counted (it is an edge of every submodule), nor is a
    module not among ``modules`` (a compiled one: ``gpu_shim._reader``)."""
    known = {m for m, _ in modules}

    graph: dict[str, set[str]] = {}
    for module, path in modules:
        edges: set[str] = set()
        for node, name, level in imported(ast.parse(path.read_text())):
            if level > 0:
                continue  # refused by the layer rules
            if level == -1:
                if name in known:
                    edges.add(name)
                continue
            if isinstance(node, ast.ImportFrom) and all(
                f"{name}.{a.name}" in known for a in node.names
            ):
                continue  # only submodules, each counted above
            if name in known:  # else a module we cannot read (compiled) or not ours
                edges.add(name)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node, each sorted: every import
    cycle lies within one (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def folders(graph: dict[str, set[str]], package: str, subpackages: set[str]) -> dict[str, set[str]]:
    """``graph`` within ``package``, each subpackage (of ``subpackages``) made one node and
    the modules at the package's top another (``package`` itself)."""

    def unit(m: str) -> str:
        first = m[len(package) + 1 :].split(".")[0]
        return f"{package}.{first}" if f"{package}.{first}" in subpackages else package

    inside = [m for m in graph if m.startswith(package + ".")]
    out: dict[str, set[str]] = {}
    for m in inside:
        targets = {unit(t) for t in graph[m] if t.startswith(package + ".")}
        out.setdefault(unit(m), set()).update(targets - {unit(m)})
    return out


def _packages(modules: list[tuple[str, Path]]) -> set[str]:
    return {m for m, path in modules if path.name == "__init__.py"}


GRAPH = import_graph(MODULES)


def test_no_import_cycles() -> None:
    """Not in any package of ours, ``TYPE_CHECKING`` imports included."""
    assert cycles(GRAPH) == []


def test_the_domain_folders_go_one_way() -> None:
    """services.domain's subpackages (and the modules at its top) import each other one
    way: the folders show the layers."""
    graph = folders(GRAPH, "services.domain", _packages(MODULES))
    assert {"services.domain", "services.domain.fold", "services.domain.tenancy"} <= set(graph)
    assert {"services.domain.scheduling", "services.domain.access"} <= set(graph)
    assert cycles(graph) == []


def _plant(root: Path, files: dict[str, str]) -> list[tuple[str, Path]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return _modules(root, {name.split("/")[0] for name in files})


def test_a_planted_cycle_is_found(tmp_path: Path) -> None:
    modules = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import B\nA = 1\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                "    from pkg.a import A\nB = 2\n"
            ),
            "pkg/c.py": "from pkg import a\n",  # imports the cycle, is not in it
            "other/__init__.py": "",
            "other/x.py": (
                "def f():\n    import importlib\n\n    return importlib.import_module('other.y')\n"
            ),
            "other/y.py": "from other import x\n",
        },
    )
    assert cycles(import_graph(modules)) == [["other.x", "other.y"], ["pkg.a", "pkg.b"]]


def test_a_planted_cycle_of_folders_is_found(tmp_path: Path) -> None:
    """No module imports itself round, but the package's top and a subpackage do."""
    modules = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/top.py": "from pkg.sub.a import A\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/a.py": "A = 1\n",
            "pkg/sub/b.py": "from pkg.top import A\n",
        },
    )
    graph = import_graph(modules)
    assert cycles(graph) == []
    assert cycles(folders(graph, "pkg", _packages(modules))) == [["pkg", "pkg.sub"]]


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
