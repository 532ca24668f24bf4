"""Checks of a session request's content, beyond what decoding already enforces."""

from functools import lru_cache

from events import SessionRequested, SessionType
from events import subjects as subj
from services.domain.container_spec import env_problem
from services.domain.durations import LONGEST_S
from services.domain.image_ref import image_reference_problem
from services.domain.resources import MAX_AMOUNT
from services.domain.secrets import references_problem
from services.domain.tenancy.vfolders import MAX_MOUNTS

__all__ = ["MAX_PRIORITY", "invalid_request", "session_type_of", "valid_image"]

MAX_PRIORITY = 100


def valid_image(image: str) -> bool:
    """Whether ``image`` is a well-formed image reference (``image_ref``'s grammar, the one
    the CLI checks at the door).

    The grammar only ever admits more than it did: a request it once refused was
    rejected on the log, and a replay folds that rejection whatever the grammar says now.
    """
    return _image_problem(image) is None


@lru_cache(maxsize=1024)
def _image_problem(image: str) -> str | None:
    # Every fold checks every request, and a cluster runs few distinct images.
    return image_reference_problem(image)


def session_type_of(e: SessionRequested) -> SessionType:
    """The type asked for; a request that names none (all from before types) is batch
    when it has a command, interactive when it has none."""
    if e.session_type is not None:
        return e.session_type
    return SessionType.BATCH if e.command else SessionType.INTERACTIVE


def invalid_request(e: SessionRequested) -> str | None:
    """Why the request can never be accepted as written, or None."""
    if not subj.is_token(e.owner):
        return f"access key {e.owner!r} must be 1-64 letters, digits, '-' or '_'"
    if not subj.is_token(e.session_id):
        return f"session id {e.session_id!r} must be 1-64 letters, digits, '-' or '_'"
    if e.cpu_only:
        if e.slots.fgpu != 0:
            return "a CPU-only session asks for no fGPU"
    elif e.slots.fgpu <= 0:
        return "fGPU must be greater than zero"
    if e.slots.cpu <= 0:
        return "cpu must be greater than zero"
    if e.slots.mem <= 0:
        return "mem must be greater than zero"
    if max(e.slots.fgpu, e.slots.cpu, e.slots.mem) > MAX_AMOUNT:
        return "a requested amount is more than any cluster holds"
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
    if len(e.gpu_models) > 64 or any(not 0 < len(m) <= 128 for m in e.gpu_models):
        return "gpu_models must be at most 64 names of 1-128 characters"
    if e.group is not None and not subj.is_token(e.group):
        return f"group {e.group!r} must be 1-64 letters, digits, '-' or '_'"
    if e.lifetime_s is not None and not 0 < e.lifetime_s <= LONGEST_S:
        return f"lifetime must be 1 s to {LONGEST_S} s (a century; for ever: leave it out)"
    if e.session_type is SessionType.BATCH and not e.command:
        return "a batch session runs a command: give one"
    if len(e.mounts) > MAX_MOUNTS or any(not 0 < len(m.name) <= 128 for m in e.mounts):
        return f"mounts must be at most {MAX_MOUNTS} folder names of 1-128 characters"
    if e.secret_env:
        problem = references_problem(e.secret_env, e.env)
        if problem is not None:
            return problem
    return env_problem(e.env) if e.env else None
