"""A task's session request, and the ids the pipeline actor puts on the log.

Every id is derived, never drawn: from the run, the task, the round and the attempt,
keyed with a salt of the log (``RunIds``), so an actor that crashed and starts again
makes the same ids, the log dedupes what it sent already, and a session id is asked for
once (the fold refuses one asked for twice). Users cannot make them: a guessed session id
taken first would have the task's request refused.
"""

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from events import (
    AddRevision,
    CreateEndpoint,
    EnvVar,
    HealthSpec,
    PipelineSpec,
    PipelineTask,
    RevisionSpec,
    ServeCommand,
    SessionRequested,
    SessionType,
    VfolderMount,
)
from services.domain.tenancy.vfolders import PIPELINE_MOUNT

__all__ = [
    "DIR_ENV",
    "RUN_ENV",
    "TASK_ENV",
    "RunIds",
    "draft_request",
    "serve_command",
    "task_request",
]

RUN_ENV = "FGPU_PIPELINE_RUN"
DIR_ENV = "FGPU_PIPELINE_DIR"
TASK_ENV = "FGPU_PIPELINE_TASK"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RunIds:
    """The ids of run ``run_id``'s decisions, keyed with ``salt`` (the actor's, from the
    log's identity: the same for every pipeline actor of one log)."""

    salt: str
    run_id: str

    def _digest(self, *parts: object) -> str:
        message = "\0".join([self.run_id, *map(str, parts)]).encode()
        return hmac.new(self.salt.encode(), message, hashlib.sha256).hexdigest()

    def session(self, task: str, round_: int, attempt: int) -> str:
        return "t" + self._digest("session", task, round_, attempt)[:15]

    def event(self, what: str, *parts: object) -> str:
        return self._digest("event", what, *parts)[:32]


def _environment(spec: PipelineSpec, task: PipelineTask) -> list[EnvVar]:
    """The task's environment: the run's, the task's own over it (by name)."""
    merged = {v.name: v for v in spec.environment}
    merged.update((v.name, v) for v in task.environment)
    return list(merged.values())


def _command(spec: PipelineSpec, task: PipelineTask, run_id: str) -> tuple[str, ...]:
    # A session request carries no environment in clear: ``env`` (POSIX, in every image
    # with a shell's tools) sets it for the task's command. Secrets are references the
    # agent resolves into the container's environment, which ``env`` keeps.
    env = [f"{v.name}={v.value}" for v in _environment(spec, task) if v.secret is None]
    env += [f"{RUN_ENV}={run_id}", f"{TASK_ENV}={task.name}", f"{DIR_ENV}={PIPELINE_MOUNT}"]
    return ("env", *env, *task.command)


def task_request(
    spec: PipelineSpec,
    task: PipelineTask,
    *,
    owner: str,
    run_id: str,
    session_id: str,
    event_id: str,
    at: datetime,
    project: str | None,
    correlation_id: str | None,
    causation_id: str | None = None,
    folder: str | None = None,
) -> SessionRequested:
    """The session request of one attempt of ``task``, in ``owner``'s name (made by the
    pipeline actor: its ``actor``), with the run's ``folder`` at ``/pipeline``."""
    mounts = task.mounts
    if folder is not None:
        mounts += (VfolderMount(name=folder, at=PIPELINE_MOUNT),)
    return SessionRequested(
        id=event_id,
        at=at,
        actor="pipeline",
        causation_id=causation_id,
        correlation_id=correlation_id,
        session_id=session_id,
        owner=owner,
        image=task.image,
        command=_command(spec, task, run_id),
        slots=task.slots,
        name=f"{spec.name}/{task.name}",
        project=project,
        cpu_only=task.slots.fgpu == 0,
        group=task.group,
        lifetime_s=task.timeout_s,
        session_type=SessionType.BATCH,
        mounts=mounts,
        secret_env=tuple(
            (v.name, v.secret) for v in _environment(spec, task) if v.secret is not None
        ),
    )


def draft_request(spec: PipelineSpec, task: PipelineTask, owner: str) -> SessionRequested:
    """``task``'s request as any attempt makes it but for its ids: what validation
    checks."""
    return task_request(
        spec,
        task,
        owner=owner,
        run_id="draft",
        session_id="draft",
        event_id="draft",
        at=_EPOCH,
        project=None,
        correlation_id=None,
    )


class _RunOf(Protocol):
    owner: str
    run_id: str
    project: str | None


def serve_command(
    spec: PipelineSpec,
    task: PipelineTask,
    endpoints: Mapping[str, tuple[str, str]],
    run: _RunOf,
    endpoint_id: str,
) -> ServeCommand:
    """What serve ``task`` of ``run`` asks the serving actor: a new revision of the
    owner's live endpoint of its name (``endpoints``: each live one's owner and name),
    else a new endpoint ``endpoint_id``. Each replica gets the run's environment, its
    secrets by name."""
    serve = task.serve
    assert serve is not None
    variables = _environment(spec, task)
    env = [(v.name, v.value) for v in variables if v.secret is None]
    env += [(RUN_ENV, run.run_id), (TASK_ENV, task.name)]
    secret_env = sorted((v.name, v.secret) for v in variables if v.secret is not None)
    revision = RevisionSpec(
        image=task.image,
        command=task.command,
        port=serve.port,
        model=serve.model,
        slots=task.slots,
        cpu_only=task.slots.fgpu == 0,
        env=tuple(sorted(env)),
        secret_env=tuple(secret_env),
        health=HealthSpec(path=serve.health_path),
    )
    mine = [
        e for e, (owner, name) in endpoints.items() if (owner, name) == (run.owner, serve.endpoint)
    ]
    if mine:
        return AddRevision(endpoint_id=mine[0], revision=revision, replicas=serve.replicas)
    return CreateEndpoint(
        endpoint_id=endpoint_id,
        name=serve.endpoint,
        project=run.project,
        group=task.group,
        public=serve.public,
        revision=revision,
        replicas=serve.replicas,
    )
