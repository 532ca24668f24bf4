"""A session's story in words: who asked, when it waited and why, where it ran, how it ended.

Pure: it reads the session's events (in log order) and the transitions the fold made of
them, so an event that changed nothing (a duplicate, a late report, a decision that lost
a race) is told as such. The read API and ``fgpu audit session`` tell the same story.
"""

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from events import (
    AnyEvent,
    DestroyRejected,
    GpuOomRefused,
    GpuOverSlice,
    GpuShareExceeded,
    GpuUsageSampled,
    SessionAdmitted,
    SessionCancelled,
    SessionChannelClosed,
    SessionChannelOpened,
    SessionDestroyRequested,
    SessionErrored,
    SessionExecFinished,
    SessionExecStarted,
    SessionLost,
    SessionPreparing,
    SessionPulling,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    SessionUnplaced,
)
from services.domain.resources import format_cpu, format_fgpu, format_mem

__all__ = ["Line", "story", "summary"]

# Events that move a session from one status to another when the fold accepts them.
_TRANSITIONS = (
    SessionRequested,
    SessionAdmitted,
    SessionRejected,
    SessionCancelled,
    SessionScheduled,
    SessionTerminating,
    SessionPreparing,
    SessionRunning,
    SessionTerminated,
    SessionErrored,
    SessionUnplaced,
    SessionLost,
)


@dataclass(frozen=True)
class Line:
    seq: int
    at: datetime
    actor: str
    text: str
    effect: bool  # False: the fold ignored it (duplicate, late, from elsewhere)


def _duration(start: datetime | None, end: datetime) -> str:
    if start is None:
        return ""
    seconds = (end - start).total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def story(events: Sequence[tuple[int, AnyEvent]], transitions: set[str]) -> list[Line]:
    """One line per event of the session, in log order; of its usage samples, only the
    last one of each GPU.

    ``events`` are the session's own: those the fold refused (a request for its id by
    another, a record on a subject not its own) are no part of its story. ``transitions``
    are the ids of the events the fold turned into status changes. A refused destroy
    request, and its refusal, changed nothing.
    """
    out: list[Line] = []
    admitted: datetime | None = None
    running: datetime | None = None
    measured: dict[int, tuple[int, GpuUsageSampled]] = {}  # the last sample of each GPU
    refused = {e.causation_id for _, e in events if isinstance(e, DestroyRejected)}
    for seq, e in events:
        if isinstance(e, GpuUsageSampled):
            measured[e.gpu_index] = (seq, e)
            continue
        text = _text(e, admitted, running)
        if isinstance(e, _TRANSITIONS):
            effect = e.id in transitions
            if not effect:
                text += " (no effect: it did not fit the session's status then)"
        elif isinstance(e, SessionDestroyRequested) and e.id in refused:
            effect = False
            text += " (refused)"
        else:
            effect = not isinstance(e, DestroyRejected)
        if effect and isinstance(e, SessionAdmitted):
            admitted = e.at
        if effect and isinstance(e, SessionRunning):
            running = e.at
        out.append(Line(seq=seq, at=e.at, actor=_who(e), text=text, effect=effect))
    for seq, e in measured.values():
        out.append(Line(seq=seq, at=e.at, actor=e.actor, text=_text(e, None, None), effect=True))
    out.sort(key=lambda line: line.seq)
    return out


def _who(e: AnyEvent) -> str:
    """Who made ``e``: of a request, the access key on whose subject it stands (what it
    says of its ``actor`` is the sender's word); of anything else, its ``actor``."""
    match e:
        case SessionRequested():
            return e.owner
        case SessionDestroyRequested():
            return e.requester
        case _:
            return e.actor


def _text(e: AnyEvent, admitted: datetime | None, running: datetime | None) -> str:
    """``e`` in words; ``admitted`` and ``running``: when the session was admitted and
    started running (None: not yet), for how long it waited and ran."""
    told = (
        _asking_text(e, admitted)
        or _starting_text(e)
        or _ending_text(e, running)
        or _access_text(e)
        or _gpu_text(e)
    )
    return told or str(e.__struct_config__.tag or type(e).__name__)


def _asking_text(e: AnyEvent, admitted: datetime | None) -> str | None:
    """A request, and the decisions on it up to a place; None for any other event."""
    match e:
        case SessionRequested():
            s = e.slots
            what = f"{format_fgpu(s.fgpu)} fGPU, {format_cpu(s.cpu)} CPU, {format_mem(s.mem)}"
            prio = f", priority {e.priority}" if e.priority else ""
            mounts = ", ".join(m.name + (" (read-only)" if m.read_only else "") for m in e.mounts)
            mounting = f", mounting {mounts}" if mounts else ""
            return f"{e.owner} asked for {what} to run {e.image}{prio}{mounting}"
        case SessionAdmitted() if e.image is not None:
            return f"quota admitted it to run {e.image}: it waits for a place (PENDING)"
        case SessionAdmitted():
            return "quota admitted it: it waits for a place (PENDING)"
        case SessionRejected():
            return f"rejected ({e.code}): {e.reason}"
        case SessionQueued():
            return f"it waits: {e.reason}"
        case SessionScheduled():
            where = ", ".join(f"gpu{d.gpu_index} {format_fgpu(d.fgpu)} fGPU" for d in e.devices)
            waited = _duration(admitted, e.at)
            after = f" after waiting {waited}" if waited else ""
            return f"placed on {e.agent_id} ({where or 'no GPU'}){after}"
        case _:
            return None


def _starting_text(e: AnyEvent) -> str | None:
    """An agent readying and starting a session's container; None for any other event."""
    match e:
        case SessionPreparing():
            return f"{e.agent_id} prepares its container"
        case SessionPulling() if e.current == 0 and e.total == 0:
            return f"{e.agent_id} pulls {e.image} from its registry"
        case SessionPulling():
            of = f" of {format_mem(e.total)}" if e.total else ""
            return f"{e.agent_id} pulled {format_mem(e.current)}{of} of {e.image}"
        case SessionRunning():
            return f"running on {e.agent_id} in container {e.container_id[:12]}"
        case _:
            return None


def _ending_text(e: AnyEvent, running: datetime | None) -> str | None:
    """A destroy request and every way a session ends or is taken back; None for any
    other event."""
    match e:
        case SessionDestroyRequested():
            return f"{e.requester} asked to destroy it"
        case DestroyRejected():
            return f"destroy by {e.requester} refused: {e.reason}"
        case SessionCancelled():
            return f"cancelled before it started: {e.reason}"
        case SessionTerminating():
            return f"{e.agent_id} is asked to stop it: {e.reason}"
        case SessionTerminated():
            ran = _duration(running, e.at)
            code = "unknown" if e.exit_code is None else str(e.exit_code)
            return f"ended with exit code {code} ({e.reason})" + (f" after {ran}" if ran else "")
        case SessionErrored():
            return f"could not start on {e.agent_id}: {e.reason}"
        case SessionUnplaced():
            return f"taken back from {e.agent_id} to be placed again: {e.reason}"
        case SessionLost():
            return f"ended with its agent: {e.reason}"
        case _:
            return None


def _access_text(e: AnyEvent) -> str | None:
    """A command run or a channel opened into the session (the audit of people's access);
    None for any other event."""
    match e:
        case SessionExecStarted():
            return f"{e.requester} ran {shlex.join(e.argv)} in it"
        case SessionExecFinished():
            if e.exit_code is None:
                return f"the command {e.requester} ran did not finish: {e.error}"
            wrote = f"{format_mem(e.stdout_bytes)} out, {format_mem(e.stderr_bytes)} err"
            return f"the command {e.requester} ran exited {e.exit_code} ({wrote})"
        case SessionChannelOpened(kind="logs"):
            return f"{e.requester} followed its output"
        case SessionChannelOpened():
            what = f"port {e.target}" + (f" ({e.service})" if e.service else "")
            opened = f"a terminal ({e.target})" if e.kind == "shell" else what
            return f"{e.requester} opened {opened} into it"
        case SessionChannelClosed():
            moved = f"{format_mem(e.bytes_in)} in, {format_mem(e.bytes_out)} out"
            code = "" if e.exit_code is None else f", exit {e.exit_code}"
            return f"the channel {e.requester} opened closed: {e.reason} ({moved}{code})"
        case _:
            return None


def _gpu_text(e: AnyEvent) -> str | None:
    """What the shim and the agent measured and enforced on the session's GPUs; None for
    any other event."""
    match e:
        case GpuOomRefused():
            return (
                f"the shim refused {format_mem(e.requested)} on gpu{e.gpu_index} to pid {e.pid}:"
                f" {format_mem(e.mem_used)} of its {format_mem(e.mem_limit)} in use"
            )
        case GpuOverSlice():
            return (
                f"{e.agent_id} stopped it: its processes ({_pids(e.pids)}) held"
                f" {format_mem(e.held)} on gpu{e.gpu_index}, over its slice of"
                f" {format_mem(e.mem_limit)} and the {format_mem(e.tolerance)} allowed beyond"
            )
        case GpuShareExceeded():
            return (
                f"its processes ({_pids(e.pids)}) kept gpu{e.gpu_index}'s SMs busy"
                f" {_percent(e.used_ppm)} of {e.window_s} s, over its share of"
                f" {_percent(e.sm_share_ppm)}"
            )
        case GpuUsageSampled():
            return (
                f"last measured on gpu{e.gpu_index}: {format_mem(e.mem_used)} of"
                f" {format_mem(e.mem_limit)} in use (peak {format_mem(e.mem_peak)}),"
                f" {e.launches} kernel launches, {e.oom_refusals} refused allocations"
            )
        case _:
            return None


def _pids(pids: Sequence[int]) -> str:
    return ("pid " if len(pids) == 1 else "pids ") + ", ".join(str(p) for p in pids)


def _percent(ppm: int) -> str:
    """ "25%" for 250000 parts per million, exactly."""
    return f"{(Decimal(ppm) / 10_000).normalize():f}%"


def summary(lines: Sequence[Line]) -> str:
    """The story in one sentence (the last thing that had an effect)."""
    done = [line for line in lines if line.effect]
    return done[-1].text if done else "nothing is known of this session"
