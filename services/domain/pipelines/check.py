"""Everything that keeps a pipeline from running, each one line: the document's fields
(``document``), its graph (``dag``), and each task against the user's rights
(``limits``). The CLI says these before it sends a run; the pipeline actor refuses a
run whose spec has any of the first two (it may have been sent by another client)."""

from collections.abc import Collection

from events import PipelineSpec
from services.domain.pipelines.dag import graph_problems
from services.domain.pipelines.document import SpecError, decode_document, to_spec
from services.domain.pipelines.limits import Limits, spec_problems

__all__ = ["check_text", "run_problems", "secret_problems"]


def run_problems(spec: PipelineSpec, owner: str, limits: Limits | None = None) -> list[str]:
    """Why ``spec`` cannot run for ``owner``: its graph's problems first, then each
    task's (against ``limits``, when given). Empty: it can."""
    problems = graph_problems(spec.tasks)
    if any((t.kind == "serve") != (t.serve is not None) for t in spec.tasks):
        problems.append("tasks: a task of kind serve, and only one, names its endpoint")
    return problems + spec_problems(spec, owner, limits)


def secret_problems(spec: PipelineSpec, held: Collection[str]) -> list[str]:
    """Each secret ``spec`` refers to that is not among ``held`` (the owner's secrets'
    names), once each, naming where it is referred to first."""
    places = [("environment", v) for v in spec.environment]
    places += [(f"tasks.{t.name}.environment", v) for t in spec.tasks for v in t.environment]
    problems: dict[str, str] = {}
    for where, v in places:
        if v.secret is not None and v.secret not in held and v.secret not in problems:
            problems[v.secret] = (
                f"{where}.{v.name}: no secret {v.secret} of yours (fgpu secret set {v.secret})"
            )
    return list(problems.values())


def check_text(
    text: str, owner: str, limits: Limits | None = None
) -> tuple[PipelineSpec | None, list[str]]:
    """The spec in YAML ``text`` and its problems (the spec None when it is unreadable)."""
    try:
        spec = to_spec(decode_document(text))
    except SpecError as e:
        return None, [str(e)]
    return spec, run_problems(spec, owner, limits)
