"""Checks of a session request's content, beyond what decoding already enforces."""

import re
from functools import lru_cache

from events import SessionRequested
from events import subjects as subj

__all__ = ["MAX_PRIORITY", "invalid_request", "valid_image"]

MAX_PRIORITY = 100
_IMAGE = re.compile(
    r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)


def valid_image(image: str) -> bool:
    """Whether ``image`` is a well-formed image reference (``name[:tag][@digest]``)."""
    return len(image) <= 255 and _matches_image(image)


@lru_cache(maxsize=1024)
def _matches_image(image: str) -> bool:
    # Every fold checks every request, and a cluster runs few distinct images.
    return bool(_IMAGE.match(image))


def invalid_request(e: SessionRequested) -> str | None:
    """Why the request can never be accepted as written, or None."""
    if not subj.is_token(e.owner):
        return f"access key {e.owner!r} must be 1-64 letters, digits, '-' or '_'"
    if not subj.is_token(e.session_id):
        return f"session id {e.session_id!r} must be 1-64 letters, digits, '-' or '_'"
    if e.slots.fgpu <= 0:
        return "fGPU must be greater than zero"
    if e.slots.cpu <= 0:
        return "cpu must be greater than zero"
    if e.slots.mem <= 0:
        return "mem must be greater than zero"
    if not 0 <= e.priority <= MAX_PRIORITY:
        return f"priority must be between 0 and {MAX_PRIORITY}, got {e.priority}"
    if not valid_image(e.image):
        return f"image {e.image!r} is not a valid image reference"
    command = e.command
    # The total length bounds each argument's: look at them one by one only past it.
    if len(command) > 256 or (
        sum(map(len, command)) > 8192 and any(len(a) > 8192 for a in command)
    ):
        return "command is too long"
    if e.name is not None and len(e.name) > 128:
        return "name is longer than 128 characters"
    return None
