"""Shared CLI plumbing: where NATS and the read API are, who the user is, how errors show.

Light on purpose: every ``fgpu`` call imports this, so rich, anyio and the NATS client
are imported by the commands that use them, not here.
"""

import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from services.cli.api_client import ApiError, ApiUnreachable, ReadApi
from services.cli.home import fgpu_home

if TYPE_CHECKING:
    from rich.console import Console

    from services.adapters.nats_connection import NatsConnection
    from services.client import Client
    from services.wiring.identity import Identity

__all__ = [
    "HostProblem",
    "Settings",
    "api_errors",
    "connection",
    "default_archive_dir",
    "default_vfolder_root",
    "fail",
    "out",
    "print_json",
    "resolve_nats",
    "run_async",
    "said",
    "state_file",
    "user_client",
    "warn",
]

T = TypeVar("T")
DEFAULT_NATS = "nats://127.0.0.1:4222"
NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def state_file() -> Path:
    """Where ``fgpu up`` says where it is, for the other commands to find it."""
    return fgpu_home() / "up.json"


def default_vfolder_root() -> Path:
    """Where this host's storage hosts' virtual folders are by default: $FGPU_HOME/vfolders
    (``<root>/<host>/<folder id>``)."""
    return state_file().parent / "vfolders"


def default_archive_dir() -> Path:
    """The log's archive: beside the store of the running ``fgpu up``, else beside the
    default store ($FGPU_HOME/store/archive)."""
    store = _from_state_file("store_dir")
    return Path(store) / "archive" if store else state_file().parent / "store" / "archive"


def _from_state_file(key: str) -> str | None:
    try:
        value = json.loads(state_file().read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


class HostProblem(Exception):
    """Something the host lacks, or another holds, that a command needs (a home it may
    write in, a container engine, a free port), said with what to do: ``run_async`` says
    it in one line and exits 1. For code that cannot exit where it finds it (a
    coroutine's); elsewhere ``fail(..., code=1)``."""


@dataclass
class Settings:
    nats: str | None
    api: str | None
    access_key: str
    secret_key: str | None = None
    service_keys: str | None = None  # a services.json: daemons take their keypair there
    request_id: str | None = None  # ``fgpu admin --request-id``: the request's id

    @property
    def url(self) -> str:
        return resolve_nats(self.nats)

    def identity(self, service: str | None = None) -> "Identity":
        """Who this process speaks as on the bus: the keypair of ``service`` (``quota``,
        ``agent:<id>``, ...) where service keys are given, else the user's (anonymous
        without a secret). Exits 2 if the service has no keypair there."""
        from services.cli.identities import kept_service_key
        from services.wiring.identity import Identity

        path = self.service_keys or os.environ.get("FGPU_SERVICE_KEYS")
        if service is not None and path:
            try:
                return kept_service_key(Path(path), service)
            except ValueError as e:
                fail(str(e))
        return Identity(self.access_key, self.secret_key)

    @property
    def api_url(self) -> str | None:
        """--api, else $FGPU_API, else the one ``fgpu up`` serves; None if none is known."""
        return self.api or os.environ.get("FGPU_API") or _from_state_file("api_url")

    def read_api(self) -> ReadApi:
        """The read API (``api_url``); exits with one line if none is known."""
        url = self.api_url
        if url is None:
            fail(
                f"no read API known: `fgpu up` is not running here ({state_file()} names "
                "none); give --api URL or set FGPU_API (`fgpu api` serves one)",
                code=1,
            )
        from services.cli.api_tokens import TokenCache
        from services.cli.credentials import credentials_file

        tokens = TokenCache(credentials_file().with_name("api-tokens.json"))
        try:
            return ReadApi(url, access_key=self.access_key, secret=self.secret_key, tokens=tokens)
        except ValueError as e:
            fail(str(e))


@asynccontextmanager
async def connection(
    settings: Settings, service: str | None = None
) -> "AsyncIterator[NatsConnection]":
    """The log and the bus, for a command that publishes or asks an agent; as the keypair
    of ``service`` where service keys are given (``Settings.identity``)."""
    from services.adapters.nats_import import import_nats_client

    _quiet_logs()
    url = settings.url
    import_nats_client(websockets=url.startswith(("ws://", "wss://")))
    from services.adapters.nats_connection import nats_connection

    options = settings.identity(service).options()
    async with nats_connection(url, name="fgpu-cli", **options) as conn:
        yield conn


def _quiet_logs() -> None:
    """A command is no daemon: what the adapters log below a warning is not for its user."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


@asynccontextmanager
async def user_client(settings: Settings) -> "AsyncIterator[Client]":
    """The user's requests (``services.client.Client``) in the name of the access key,
    handed to the intake where the server has tenancy, else appended to the log; exits 2
    with one line if it cannot be one."""
    from events import subjects as subj
    from services.adapters.system_clock import SystemClock
    from services.client import Client

    if not subj.is_token(settings.access_key):
        fail(f"access key {settings.access_key!r} must be 1-64 letters, digits, '-' or '_'")
    async with connection(settings) as conn:
        sender = conn.sender(settings.access_key)
        yield Client(
            conn.log, SystemClock(), settings.access_key, sender=sender, secret=settings.secret_key
        )


def resolve_nats(given: str | None) -> str:
    """--nats, else $FGPU_NATS, else where `fgpu up` said it is, else the default port.
    Exits 2 with one line if it is no NATS URL (an http:// one: the read API's, say)."""
    url = given or os.environ.get("FGPU_NATS") or _from_state_file("nats_url") or DEFAULT_NATS
    for one in url.split(","):
        scheme = one.strip().partition("://")[0].lower() if "://" in one else "nats"
        if scheme not in NATS_SCHEMES:
            fail(
                f"{one.strip()!r} is no NATS URL: nats://HOST:PORT (or tls://, ws://, wss://);"
                " the read API's address goes to --api or FGPU_API"
            )
    return url


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, and exit ``code`` (2: refused input; 1: it did not work)."""
    sys.stdout.flush()
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(code)


def warn(message: str) -> None:
    """A line on stderr: a refusal, or something the user should know."""
    sys.stdout.flush()
    sys.stderr.write(f"warning: {message}\n")


# Piped output is not cut to 80 columns: ids and statuses must stay whole for readers.
@cache
def out() -> "Console":
    """The console for tables and coloured text (rich is imported on first use)."""
    from rich.console import Console

    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(width=width)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def said(as_json: bool, value: dict[str, str], line: str) -> None:
    """What a command did: ``value`` as JSON, or ``line`` for a person."""
    if as_json:
        print_json(value)
    else:
        out().print(line, highlight=False)


@contextmanager
def api_errors() -> Iterator[None]:
    """The read API's failures as one line each, and an exit."""
    try:
        yield
    except ApiUnreachable as e:
        fail(f"{e} (is `fgpu up` or `fgpu api` running? set --api or FGPU_API)", code=1)
    except ApiError as e:
        fail(e.detail, code=1 if e.status != 422 else 2)


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception at the bottom of ``group``, or the group if it holds several."""
    leaves = list(_leaves(group))
    return leaves[0] if len(leaves) == 1 else group


def _leaves(e: BaseException) -> Iterator[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        for inner in e.exceptions:
            yield from _leaves(inner)
    else:
        yield e


def run_async(fn: Callable[[], Awaitable[T]], *, passing: tuple[type[Exception], ...] = ()) -> T:
    """Run ``fn`` and turn the errors a user can act on into one clear line; those of
    ``passing`` are raised as they are, for the caller to say."""
    import anyio

    from services.ports import LogError, StreamMissing

    try:
        try:
            return anyio.run(fn)
        except BaseExceptionGroup as group:
            raise _sole(group) from None  # a task group's one failure, as itself
    except passing:
        raise
    except (StreamMissing, HostProblem) as e:
        fail(str(e), code=1)  # it says what to do: no hint about fgpu up
    except LogError as e:
        hint = "" if "refused" in str(e) else " (is `fgpu up` running? set --nats or FGPU_NATS)"
        fail(f"{e}{hint}", code=1)
    except ValueError as e:
        fail(str(e))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
