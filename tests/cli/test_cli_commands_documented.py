"""Every ``fgpu ...`` command the docs name exists: README.md and docs/*.md are read for
``fgpu`` in their code (fenced blocks and inline spans), the words after it up to the
first option or placeholder are taken as a command path, and that path is walked in the
CLI's own command tree. A path that leaves the tree (a group given a word that is none of
its commands) fails, with where the docs name it."""

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import typer

from services.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"`([^`\n]+)`")
# ``fgpu`` as a command: not part of a path, a package or another name (fgpu/busybox,
# ~/.fgpu, fgpu-shim), and what it is given, up to the end of the shell command.
_FGPU = re.compile(r"(?<![\w./~-])fgpu[ \t]+([^\n;|&#]*)")
_WORD = re.compile(r"[a-z][a-z0-9-]*")


class Named(NamedTuple):
    """A command path (``("admin", "group", "ls")``) named at ``where`` (file:line)."""

    words: tuple[str, ...]
    where: str


def code_of(text: str) -> Iterator[tuple[int, str]]:
    """Each piece of code in a Markdown text, with the line it starts on: the lines of
    the fenced blocks, then the inline spans of the prose between them."""
    prose = text
    for block in _FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        yield from _lines(block.group(1), first)
        prose = prose.replace(block.group(0), "\n" * block.group(0).count("\n"), 1)
    for span in _SPAN.finditer(prose):
        yield prose.count("\n", 0, span.start()) + 1, span.group(1)


def _lines(block: str, first: int) -> Iterator[tuple[int, str]]:
    """The lines of a code block that starts on line ``first``, a line that ends in a
    backslash joined to the next (a shell command continued)."""
    start, joined = first, ""
    for n, line in enumerate(block.splitlines(), first):
        if not joined:
            start = n
        if line.endswith("\\"):
            joined += line[:-1] + " "
            continue
        yield start, joined + line
        joined = ""
    if joined:
        yield start, joined


def _root_options() -> frozenset[str]:
    """The options of ``fgpu`` itself (``--nats URL``), which come before the command."""
    return frozenset(
        name for p in typer.main.get_command(app).params for name in getattr(p, "opts", ())
    )


def command_words(given: str, root_options: frozenset[str]) -> tuple[str, ...]:
    """The command path at the head of what follows ``fgpu``: the root's options and
    their values skipped, then the words up to the first option, placeholder or
    punctuation."""
    tokens = given.split()
    while tokens and tokens[0].split("=")[0] in root_options:
        tokens = tokens[1:] if "=" in tokens[0] else tokens[2:]
    words: list[str] = []
    for token in tokens:
        if not _WORD.fullmatch(token):
            break
        words.append(token)
    return tuple(words)


def named_in(text: str, label: str) -> Iterator[Named]:
    """Each ``fgpu`` command named in the code of the Markdown ``text`` of file ``label``."""
    options = _root_options()
    for line, code in code_of(text):
        for found in _FGPU.finditer(code):
            words = command_words(found.group(1), options)
            if words:
                yield Named(words, f"{label}:{line}")


@cache
def _tree() -> Any:
    return typer.main.get_command(app)


def resolves(words: tuple[str, ...]) -> bool:
    """Whether ``fgpu WORDS...`` reaches a command: each word a command of the group
    before it, until a command that is no group (the words after it are its arguments)."""
    command = _tree()
    for word in words:
        commands = getattr(command, "commands", None)
        if commands is None:
            return True
        if word not in commands:
            return False
        command = commands[word]
    return True


def _documented() -> list[Named]:
    unique = {n.words: n for p in DOCS for n in named_in(p.read_text(), str(p.relative_to(ROOT)))}
    return sorted(unique.values())


def test_the_docs_name_commands_at_all() -> None:
    """The extraction finds what the docs plainly show (else the test below checks
    nothing)."""
    found = {n.words for n in _documented()}
    assert {("up",), ("session", "create"), ("admin", "init"), ("projections", "rebuild")} <= found


@pytest.mark.parametrize("named", _documented(), ids=lambda n: " ".join(n.words))
def test_each_command_the_docs_name_exists(named: Named) -> None:
    assert resolves(named.words), f"{named.where}: no command `fgpu {' '.join(named.words)}`"


@pytest.mark.parametrize(
    "words",
    [
        ("admin", "projections", "rebuild"),  # what docs/scheduling.md once named
        ("sessions", "ls"),
        ("session", "lss"),
        ("admin", "group", "list"),
    ],
    ids=" ".join,
)
def test_a_made_up_command_does_not_resolve(words: tuple[str, ...]) -> None:
    assert not resolves(words)


def test_a_wrong_command_planted_in_markdown_is_found() -> None:
    planted = (
        "Run `fgpu --nats URL scheduler`, then:\n\n"
        "```sh\nfgpu admin group ls --json\n"
        "fgpu --service-keys services.json admin projections rebuild \\\n  --db FILE\n```\n"
        "and `fgpu session ls | head; fgpu whoami`; the fgpu server has its own\n"
        "(`~/.fgpu up.json`).\n"
    )
    named = [(n.words, n.where, resolves(n.words)) for n in named_in(planted, "planted.md")]
    assert named == [
        (("admin", "group", "ls"), "planted.md:4", True),
        (("admin", "projections", "rebuild"), "planted.md:5", False),
        (("scheduler",), "planted.md:1", True),
        (("session", "ls"), "planted.md:8", True),
        (("whoami",), "planted.md:8", True),
    ]
