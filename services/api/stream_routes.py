"""The live event stream: ``/v1/events/stream`` (server-sent events, ``sse``'s).

Who may read: each viewer the records in its scope, for as long as its keypair lives (a
revoked one's stream ends) and, for the web UI, its browser session (sign-out ends it).
A reconnecting client resumes after ``Last-Event-ID``.
"""

from typing import Annotated, Any, Protocol

import anyio
from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import StreamingResponse

from services.api.guard import Guard, WhoStreaming
from services.api.params import MAX_SEQ, Ask
from services.api.sse import event_stream

__all__ = ["Projected", "mount"]


class Projected(Protocol):
    """What the stream waits on: the projector, which returns once it has committed a
    record beyond ``seq``."""

    async def wait_beyond(self, seq: int) -> int: ...


def mount(
    app: FastAPI,
    query: Ask[Any],
    source: Projected,
    stop: anyio.Event,
    guard: Guard,
) -> None:
    """The stream over ``source`` (its ``wait_beyond``), ended for all on ``stop`` and for
    a viewer once ``guard`` says it may read no more (its key revoked, its browser session
    ended)."""

    @app.get(
        "/v1/events/stream",
        tags=["events"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "events"}},
    )
    async def stream(
        request: Request,
        after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="start after it")] = 0,
        last_event_id: Annotated[
            str | None, Header(description="resume after this sequence (wins over after)")
        ] = None,
        *,
        viewer: WhoStreaming,
    ) -> StreamingResponse:
        """Server-sent events, one per log record in the viewer's scope (``id`` is its
        sequence), forever.

        A reconnecting client sends ``Last-Event-ID`` and gets every event after it:
        no gap, no duplicate."""
        start = after if last_event_id is None else _resume_after(last_event_id)
        live = guard.still(request, viewer)
        return event_stream(source, start, stop, query, viewer.scope, live)


def _resume_after(last_event_id: str) -> int:
    """The sequence ``Last-Event-ID`` names. Raises HTTPException (400: not one)."""
    text = last_event_id.strip()
    # ASCII digits only ("²" is a digit to str.isdigit, not to int), and few of them
    # (int() refuses thousands).
    if not (text.isascii() and text.isdigit() and len(text) <= 19) or int(text) > MAX_SEQ:
        raise HTTPException(400, f"Last-Event-ID must be a sequence, got {last_event_id!r}")
    return int(text)
