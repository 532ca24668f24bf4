"""One outcome per request: what the CLI says when a request (``session create``,
``session rm``, ``admin ...``) was refused or its outcome is not known.

Every request has a request id, given with ``--request-id`` or made afresh, from which
every id it puts on the log is made (``services.domain.request_ids``). So a request
whose outcome is unknown (it left, and no answer came) can be sent again with the same
request id: the log keeps it once. The CLI says which it is, in one line, exit 1:

- ``refused: WHY``: the intake or the log answered no, nothing was taken;
- ``outcome unknown (WHY): retry with --request-id ID``: it may be stored, or not.

Either names what the read API knows of the log's health when the log is not well (its
disk full, say): ``the log's disk is full: N bytes free at PATH``.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer

from services.cli.options import Settings, fail, run_async

__all__ = ["RequestIdOpt", "chosen_request_id", "log_trouble", "sent"]

T = TypeVar("T")

RequestIdOpt = Annotated[
    str | None,
    typer.Option(
        "--request-id",
        help="The request's id (default: a fresh one). Sent again with the same id, a "
        "request is done once: give the one a failed command named.",
    ),
]


def chosen_request_id(given: str | None) -> str:
    """``given``, if it may be a request id (exits 2 if not), else a fresh one."""
    from services.domain.request_ids import new_request_id, request_id_problem

    if given is None:
        return new_request_id()
    problem = request_id_problem(given)
    if problem is not None:
        fail(problem)
    return given


def log_trouble(settings: Settings) -> str | None:
    """What the read API says is wrong with the log (its disk, one line a server), or
    None: all is well, or no API is known or answers."""
    from services.cli.api_client import ApiError, ApiUnreachable

    if settings.api_url is None:
        return None
    try:
        found = settings.read_api().get("/v1/health")["log"]
        said = [str(h["reason"]) for h in found if h["state"] != "ok" and h["reason"]]
    except (ApiError, ApiUnreachable, ValueError, KeyError, TypeError):
        return None
    return "; ".join(said) or None


def sent(settings: Settings, send: Callable[[], Awaitable[T]], retry: str) -> T:
    """Run ``send`` (it sends one request); what it returns. Exits 1 with one line if the
    request was refused, or its outcome is unknown (``retry``: how to send it again, the
    request id among it)."""
    from services.ports import OutcomeUnknown, RequestsRefused

    try:
        return run_async(send, passing=(OutcomeUnknown, RequestsRefused))
    except OutcomeUnknown as e:
        fail(f"outcome unknown ({e}{_cause(settings)}): retry with {retry}", code=1)
    except RequestsRefused as e:
        fail(f"refused: {e}{_cause(settings)}", code=1)


def _cause(settings: Settings) -> str:
    trouble = log_trouble(settings)
    return f"; {trouble}" if trouble else ""
