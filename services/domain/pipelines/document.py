"""A pipeline as its author writes it (YAML), and what it becomes on the log.

The document is decoded into ``PipelineDocument`` (msgspec: unknown keys and wrong types
refused, each in one line), then turned into the ``PipelineSpec`` a run carries, amounts
made exact (``services.domain.resources``) and durations whole seconds. Every problem is
a ``SpecError`` of one line naming where it is (``tasks[2].retry.delay: ...``). Pure: the
caller reads the file.
"""

import re
from typing import Any, Literal

import msgspec
import yaml

from events import EnvVar, PipelineSpec, PipelineTask, ServeTask, Slots, VfolderMount
from services.domain.durations import LONGEST_S
from services.domain.resources import InvalidAmount, parse_cpu, parse_fgpu, parse_mem
from services.domain.secrets import name_problem

__all__ = [
    "MAX_TASKS",
    "PipelineDocument",
    "SecretRef",
    "SpecError",
    "TaskDocument",
    "decode_document",
    "document_schema",
    "parse_duration",
    "to_spec",
]

MAX_TASKS = 5000
MAX_DOCUMENT = 4 << 20  # bytes of YAML: far above any real pipeline, bounded for the log


class SpecError(ValueError):
    """A pipeline document that cannot be run; the message is one line saying where and
    why."""


class SecretRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``{secret: NAME}``: the value of the run owner's secret NAME (``fgpu secret set``),
    put in the task's environment by its agent at the start; only the name travels."""

    secret: str


class Resources(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Amounts as people write them: ``fgpu: "0.5"`` (0 or absent: no GPU),
    ``cpu: "1"`` or ``"250m"``, ``mem: "1g"``."""

    fgpu: str | int | float = "0"
    cpu: str | int | float = "1"
    mem: str | int = "1g"


class Retry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``max_attempts``: attempts in all (1: none again); ``delay`` between a failure and
    the next attempt (``30s``, ``5m``, ``1h`` or seconds)."""

    max_attempts: int = 1
    delay: str | int = 0


class Mount(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    read_only: bool = False


class ServeDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A serve task's endpoint: its name (the owner's endpoint of that name gets a new
    revision; none: a new endpoint), replicas, port, health check path, whether anyone
    may call it, and a model folder of the owner's."""

    endpoint: str
    port: int = 8000
    replicas: int = 1
    public: bool = False
    health: str = "/health"
    model: str | None = None


class TaskDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One task: a batch session running ``command`` in ``image``; or, of kind
    ``serve``, a model service (``serve``) whose replicas run it."""

    name: str
    image: str
    command: list[str] | str = []
    kind: Literal["session", "serve"] = "session"
    serve: ServeDocument | None = None
    resources: Resources = Resources()
    group: str | None = None
    mounts: list[Mount | str] = []
    dependencies: list[str] = []
    retry: Retry = Retry()
    continue_on_failure: bool = False
    skip: bool = False
    timeout: str | int | None = None
    environment: dict[str, str | int | float | bool | SecretRef] = {}


class PipelineDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The whole file: ``version`` (1), a ``name``, the ``environment`` every task gets
    (a value in clear, or ``{secret: NAME}``: the owner's secret), and ``tasks`` (each
    with an ``environment`` of its own too, over the run's)."""

    name: str
    tasks: list[TaskDocument]
    version: int = 1
    environment: dict[str, str | int | float | bool | SecretRef] = {}


_DURATION = re.compile(r"(\d+)\s*(s|m|h|d)?")
_UNIT_S = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


def parse_duration(value: str | int, where: str) -> int:
    """``value`` (``90``, ``"90s"``, ``"5m"``, ``"2h"``, ``"1d"``) in whole seconds."""
    if isinstance(value, bool):
        raise SpecError(f"{where}: a duration, not {value!r}")
    if isinstance(value, int):
        seconds = value
    else:
        m = _DURATION.fullmatch(value.strip())
        if m is None:
            raise SpecError(f"{where}: a duration is seconds or N s|m|h|d, got {value!r}")
        seconds = int(m.group(1)) * _UNIT_S[m.group(2)]
    if not 0 <= seconds <= LONGEST_S:
        raise SpecError(f"{where}: must be 0 s to {LONGEST_S} s, got {value!r}")
    return seconds


def decode_document(text: str) -> PipelineDocument:
    """The document in ``text`` (YAML; JSON is YAML too). Raises SpecError."""
    if len(text.encode()) > MAX_DOCUMENT:
        raise SpecError(f"the document is over {MAX_DOCUMENT >> 20} MiB")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise SpecError(f"not YAML{at}: {problem}") from e
    if not isinstance(raw, dict):
        raise SpecError("the document must be a mapping with name and tasks")
    try:
        return msgspec.convert(raw, PipelineDocument, strict=False)
    except msgspec.ValidationError as e:
        raise SpecError(_where(str(e))) from e


def _where(message: str) -> str:
    # msgspec says "... - at `$.tasks[0].image`": the path first reads better.
    text, sep, path = message.rpartition(" - at `")
    if not sep:
        return message
    return f"{path.rstrip('`').removeprefix('$.')}: {text}"


def to_spec(doc: PipelineDocument) -> PipelineSpec:
    """The spec a run carries. Raises SpecError for the first problem of a single field
    (the whole graph's problems are ``dag.graph_problems``')."""
    if doc.version != 1:
        raise SpecError(f"version: this fgpu reads version 1, got {doc.version}")
    if not _NAME.fullmatch(doc.name):
        raise SpecError(f"name: 1-63 letters, digits, '-' or '_', got {doc.name!r}")
    if not doc.tasks:
        raise SpecError("tasks: a pipeline has at least one task")
    if len(doc.tasks) > MAX_TASKS:
        raise SpecError(f"tasks: at most {MAX_TASKS}, got {len(doc.tasks)}")
    env = tuple(_env_var(k, v) for k, v in sorted(doc.environment.items()))
    tasks = tuple(_task(t, f"tasks[{i}]") for i, t in enumerate(doc.tasks))
    return PipelineSpec(version=doc.version, name=doc.name, environment=env, tasks=tasks)


def _env_var(name: str, value: Any, within: str = "") -> EnvVar:
    where = f"{within}environment.{name}"
    if not _ENV_NAME.fullmatch(name):
        raise SpecError(f"{where}: a variable's name is letters, digits and '_'")
    if isinstance(value, SecretRef):
        problem = name_problem(value.secret)
        if problem is not None:
            raise SpecError(f"{where}.secret: {problem}")
        return EnvVar(name=name, value="", secret=value.secret)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if len(text) > 8192:
        raise SpecError(f"{where}: at most 8192 characters")
    return EnvVar(name=name, value=text)


def _task(t: TaskDocument, where: str) -> PipelineTask:
    if not _NAME.fullmatch(t.name):
        raise SpecError(f"{where}.name: 1-63 letters, digits, '-' or '_', got {t.name!r}")
    where = f"tasks.{t.name}"
    command = tuple(["sh", "-c", t.command] if isinstance(t.command, str) else t.command)
    serve = _serve(t, where)
    if (serve is None and not command) or any(not a for a in command):
        raise SpecError(f"{where}.command: a task runs a command, with no empty argument")
    if not 1 <= t.retry.max_attempts <= 100:
        raise SpecError(f"{where}.retry.max_attempts: 1 to 100, got {t.retry.max_attempts}")
    timeout = None if t.timeout is None else parse_duration(t.timeout, f"{where}.timeout")
    env = tuple(_env_var(k, v, f"{where}.") for k, v in sorted(t.environment.items()))
    if timeout == 0:
        raise SpecError(f"{where}.timeout: must be above 0 s")
    return PipelineTask(
        name=t.name,
        kind=t.kind,
        image=t.image,
        command=command,
        slots=_slots(t.resources, f"{where}.resources"),
        group=t.group,
        mounts=tuple(_mount(m, f"{where}.mounts") for m in t.mounts),
        dependencies=tuple(t.dependencies),
        retry_max_attempts=t.retry.max_attempts,
        retry_delay_s=parse_duration(t.retry.delay, f"{where}.retry.delay"),
        continue_on_failure=t.continue_on_failure,
        skip=t.skip,
        timeout_s=timeout,
        serve=serve,
        environment=env,
    )


def _serve(t: TaskDocument, where: str) -> ServeTask | None:
    """A serve task's endpoint (None for a session task). Raises SpecError."""
    if t.kind == "session":
        if t.serve is not None:
            raise SpecError(f"{where}.serve: only a task of kind serve deploys an endpoint")
        return None
    s = t.serve
    if s is None:
        raise SpecError(f"{where}.serve: a task of kind serve names its endpoint")
    if not 1 <= s.replicas <= 100:
        raise SpecError(f"{where}.serve.replicas: 1 to 100, got {s.replicas}")
    if not 1 <= s.port <= 65535:
        raise SpecError(f"{where}.serve.port: 1 to 65535, got {s.port}")
    if not s.health.startswith("/"):
        raise SpecError(f"{where}.serve.health: a path from '/', got {s.health!r}")
    return ServeTask(
        endpoint=s.endpoint,
        port=s.port,
        replicas=s.replicas,
        public=s.public,
        health_path=s.health,
        model=s.model,
    )


def _slots(r: Resources, where: str) -> Slots:
    try:
        return Slots(
            fgpu=parse_fgpu(str(r.fgpu), zero=True),
            cpu=parse_cpu(str(r.cpu)),
            mem=parse_mem(str(r.mem)),
        )
    except InvalidAmount as e:
        raise SpecError(f"{where}: {e}") from e


def _mount(m: Mount | str, where: str) -> VfolderMount:
    if isinstance(m, str):
        name, _, mode = m.partition(":")
        if mode not in ("", "ro", "rw"):
            raise SpecError(f"{where}: NAME, NAME:ro or NAME:rw, got {m!r}")
        m = Mount(name=name, read_only=mode == "ro")
    if not 0 < len(m.name) <= 128:
        raise SpecError(f"{where}: a folder's name is 1-128 characters")
    return VfolderMount(name=m.name, read_only=m.read_only)


def document_schema() -> dict[str, Any]:
    """The JSON Schema of a pipeline document, published as the events' is."""
    schema = msgspec.json.schema(PipelineDocument)
    schema["title"] = "fgpu pipeline"
    schema["x-pipeline-version"] = 1
    return schema
