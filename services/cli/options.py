"""Shared CLI plumbing: where NATS is, who the user is, and how errors are shown."""

import gc
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import anyio
from rich.console import Console

from services.cli.stack import state_file
from services.domain.resources import InvalidAmount
from services.ports import LogError

__all__ = [
    "Settings",
    "console",
    "fail",
    "print_json",
    "resolve_nats",
    "run_async",
    "tune_gc",
]

T = TypeVar("T")
# Piped output is not cut to 80 columns: ids and statuses must stay whole for readers.
_WIDTH = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)

DEFAULT_NATS = "nats://127.0.0.1:4222"


@dataclass
class Settings:
    nats: str | None
    access_key: str

    @property
    def url(self) -> str:
        return resolve_nats(self.nats)


def resolve_nats(given: str | None) -> str:
    """--nats, else $FGPU_NATS, else where `fgpu up` said it is, else the default port."""
    if given:
        return given
    env = os.environ.get("FGPU_NATS")
    if env:
        return env
    path = state_file()
    if path.exists():
        try:
            url: str = json.loads(path.read_text())["nats_url"]
            return url
        except (ValueError, KeyError):
            pass
    return DEFAULT_NATS


def fail(message: str, code: int = 2) -> NoReturn:
    err_console.print(f"[red]error:[/] {message}")
    raise SystemExit(code)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def tune_gc() -> None:
    """For long-running actors: collect the young often, the old almost never.

    An actor's state grows with the log and lives as long as the process; CPython's full
    collections walk all of it and stalled actors for 150-800 ms in the benchmark. The
    state holds no reference cycles, so leaving the old generation alone loses nothing.
    """
    gc.set_threshold(50_000, 50, 1000)


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` and turn the errors a user can act on into one clear line."""
    try:
        return anyio.run(fn)
    except LogError as e:
        fail(f"{e} (is `fgpu up` running? set --nats or FGPU_NATS)")
    except InvalidAmount as e:
        fail(str(e))
    except ValueError as e:
        fail(str(e))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
