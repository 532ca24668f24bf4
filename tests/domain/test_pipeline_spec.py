"""A pipeline document: decoded, checked, each problem one line naming where it is."""

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import CreateEndpoint, GroupSettings, PipelineTask, ResourcePolicy, Slots
from services.domain.pipelines.check import check_text, run_problems, secret_problems
from services.domain.pipelines.dag import descendants, find_cycle, graph_problems
from services.domain.pipelines.document import document_schema
from services.domain.pipelines.limits import Limits, groups_seen
from services.domain.pipelines.requests import draft_request, serve_command

GOOD = """
version: 1
name: demo
environment: {LR: "0.1", EPOCHS: 3}
tasks:
  - name: prepare
    image: fgpu/busybox:latest
    command: [sh, -c, "echo hi > /pipeline/x"]
    resources: {cpu: "0.5", mem: 256m}
  - name: train
    image: fgpu/busybox:latest
    command: echo train
    resources: {fgpu: "0.5", cpu: 1, mem: 1g}
    dependencies: [prepare]
    retry: {max_attempts: 3, delay: 10s}
    timeout: 1h
  - name: eval
    image: fgpu/busybox:latest
    command: [echo, eval]
    dependencies: [train]
    continue_on_failure: true
"""


def test_a_good_document_becomes_an_exact_spec() -> None:
    spec, problems = check_text(GOOD, "alice")
    assert problems == [] and spec is not None
    train = spec.tasks[1]
    assert train.slots == Slots(fgpu=50, cpu=1000, mem=1 << 30)
    assert (train.retry_max_attempts, train.retry_delay_s, train.timeout_s) == (3, 10, 3600)
    assert train.command == ("sh", "-c", "echo train")
    assert spec.tasks[0].slots.fgpu == 0  # no fGPU: a CPU-only session
    assert [(v.name, v.value) for v in spec.environment] == [("EPOCHS", "3"), ("LR", "0.1")]


def _task(body: str) -> str:
    return f"name: x\ntasks:\n  - name: a\n    image: fgpu/busybox:latest\n{body}"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: x\ntasks: [a", "not YAML (line 2)"),
        ("- 1", "the document must be a mapping"),
        (
            _task("    command: x\n    bogus: 1\n"),
            "tasks[0]: Object contains unknown field `bogus`",
        ),
        ("name: x\ntasks:\n  - name: a\n    image: 3\n    command: x\n", "tasks[0].image:"),
        ("version: 2\n" + _task("    command: x\n"), "version: this fgpu reads version 1"),
        ("name: x\ntasks: []\n", "tasks: a pipeline has at least one task"),
        (_task("    command: []\n"), "tasks.a.command: a task runs a command"),
        (_task("    command: x\n    resources: {fgpu: 0.001}\n"), "tasks.a.resources: fGPU"),
        (_task("    command: x\n    retry: {delay: soon}\n"), "tasks.a.retry.delay: a duration"),
        (_task("    command: x\n    retry: {max_attempts: 0}\n"), "tasks.a.retry.max_attempts"),
        (_task("    command: x\n    kind: serve\n"), "tasks.a.serve: a task of kind serve names"),
        (_task("    command: x\n    serve: {endpoint: e}\n"), "tasks.a.serve: only a task of"),
        (
            _task("    kind: serve\n    serve: {endpoint: e, replicas: 0}\n"),
            "tasks.a.serve.replicas: 1 to 100",
        ),
        (_task("    command: x\n    mounts: ['d:rx']\n"), "tasks.a.mounts: NAME, NAME:ro"),
        (
            "environment: {T: {secret: 'h f'}}\n" + _task("    command: x\n"),
            "environment.T.secret: a secret's name is 1-63",
        ),
        (
            _task("    command: x\n    environment: {T: {secret: hf, x: 1}}\n"),
            "tasks[0].environment[...]: Object contains unknown field `x`",
        ),
        (_task("    command: x\n    dependencies: [nope]\n"), "no task is called 'nope'"),
        (_task("    command: x\n    dependencies: [a]\n"), "cannot depend on itself"),
        (_task("    command: x\n") + "  - name: a\n    image: i\n    command: y\n", "used by"),
        (_task("    command: x\n    resources: {mem: 0}\n"), "tasks.a.resources: mem must be"),
        (
            "name: x\ntasks:\n  - name: a\n    image: 'UPPER CASE'\n    command: x\n",
            "tasks.a: image 'UPPER CASE' is not a valid image reference",
        ),
    ],
)
def test_each_problem_is_one_line_naming_where(text: str, said: str) -> None:
    _spec, problems = check_text(text, "alice")
    assert problems, text
    assert any(said in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_a_cycle_is_named_with_its_tasks_in_order() -> None:
    text = GOOD.replace('resources: {cpu: "0.5", mem: 256m}', "dependencies: [eval]")
    _, problems = check_text(text, "alice")
    assert problems == [
        "tasks: a cycle, each task depending on the next: prepare -> eval -> train -> prepare"
    ]


def _t(name: str, deps: tuple[str, ...] = (), slots: Slots | None = None) -> PipelineTask:
    return PipelineTask(
        name=name,
        image="fgpu/busybox:latest",
        command=("true",),
        slots=slots or Slots(cpu=1000, mem=1 << 30, fgpu=50),
        dependencies=deps,
    )


@st.composite
def _dags(draw: st.DrawFn) -> list[PipelineTask]:
    """A random DAG: each task depends only on tasks before it."""
    n = draw(st.integers(1, 40))
    tasks = []
    for i in range(n):
        before = [f"t{j}" for j in range(i)]
        deps = draw(st.lists(st.sampled_from(before), unique=True)) if before else []
        tasks.append(_t(f"t{i}", tuple(deps)))
    return tasks


@settings(max_examples=60, deadline=None)
@given(_dags(), st.randoms(use_true_random=False))
def test_random_dags_are_accepted_in_any_order(tasks: list[PipelineTask], rnd: "st.Random") -> None:
    rnd.shuffle(tasks)
    assert graph_problems(tasks) == []


@settings(max_examples=60, deadline=None)
@given(_dags(), st.data())
def test_a_planted_cycle_is_found_and_named(tasks: list[PipelineTask], data: st.DataObject) -> None:
    """A back edge from a task to one of its descendants (or itself through a path) makes
    a cycle; the one named is a real cycle of the graph."""
    i = data.draw(st.integers(0, len(tasks) - 1))
    below = [t for t in descendants(tasks, tasks[i].name) if t != tasks[i].name]
    if not below:
        return
    j = data.draw(st.sampled_from(below))
    planted = [_t(t.name, (*t.dependencies, j)) if t.name == tasks[i].name else t for t in tasks]
    deps = {t.name: t.dependencies for t in planted}
    cycle = find_cycle(deps)
    assert cycle is not None
    for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
        assert b in deps[a]  # each depends on the next
    [problem] = graph_problems(planted)
    assert problem.startswith("tasks: a cycle") and tasks[i].name in problem


def test_a_deep_chain_needs_no_deep_stack() -> None:
    chain = [_t("t0")] + [_t(f"t{i}", (f"t{i - 1}",)) for i in range(1, 5000)]
    assert graph_problems(chain) == []
    assert len(descendants(chain, "t4990")) == 10


def test_resources_beyond_the_policies_and_any_agent_are_refused() -> None:
    spec, _ = check_text(GOOD, "alice")
    assert spec is not None
    small = Slots(cpu=4000, mem=8 << 30, fgpu=100)
    limits = Limits(
        project="d/p",
        policies=[
            (
                "user policy (alice)",
                ResourcePolicy(total_slots=Slots(cpu=500, mem=1 << 40, fgpu=100)),
            ),
            ("keypair policy", None),
        ],
        agents={"default": [small, Slots(cpu=500, mem=1 << 30, fgpu=0)]},
    )
    problems = run_problems(spec, "alice", limits)
    assert problems == [
        "tasks.train.resources: over the user policy (alice), which allows "
        + problems[0].split("allows ", 1)[1],
        "tasks.eval.resources: over the user policy (alice), which allows "
        + problems[1].split("allows ", 1)[1],
    ]
    big = Slots(cpu=1000, mem=1 << 30, fgpu=200)
    only_big = Limits(project="d/p", agents={"default": [small]})
    [problem] = run_problems(
        spec.__class__(name="x", tasks=(_t("huge", slots=big),)), "alice", only_big
    )
    assert problem.startswith("tasks.huge.resources: none of the 1 agents of resource group")


def test_a_group_closed_to_the_project_is_refused() -> None:
    spec, _ = check_text(GOOD.replace("timeout: 1h", "timeout: 1h\n    group: gpu"), "alice")
    assert spec is not None
    limits = Limits(project="d/p", groups={"gpu": GroupSettings(projects=("d/other",))})
    assert run_problems(spec, "alice", limits) == [
        "tasks.train: no resource group gpu open to project d/p"
    ]


def test_the_limits_show_a_project_only_the_groups_it_may_see_and_judge_alike() -> None:
    """The read API hands these to the user: a group closed to the project, and the other
    projects a group is open to, are not the user's to learn; the verdicts stay the same."""
    groups = {
        "default": GroupSettings(projects=("d/other",)),
        "open": GroupSettings(),
        "ours": GroupSettings(projects=("d/p", "e/theirs")),
        "theirs": GroupSettings(projects=("e/theirs",)),
    }
    seen = groups_seen(groups, "d/p")
    assert seen == {
        "default": GroupSettings(projects=()),
        "open": GroupSettings(),
        "ours": GroupSettings(projects=("d/p",)),
    }
    for group in (*groups, "none"):
        spec, _ = check_text(GOOD.replace("timeout: 1h", f"timeout: 1h\n    group: {group}"), "a")
        assert spec is not None
        full, shown = Limits(project="d/p", groups=groups), Limits(project="d/p", groups=seen)
        assert run_problems(spec, "a", shown) == run_problems(spec, "a", full), group


def test_the_schema_is_published() -> None:
    schema = document_schema()
    assert schema["title"] == "fgpu pipeline"
    task = schema["$defs"]["TaskDocument"]
    assert {"name", "image"} <= set(task["required"])  # a serve task may use its image's command
    assert {"dependencies", "retry", "continue_on_failure", "skip", "timeout", "serve"} <= set(
        task["properties"]
    )
    # A value in clear or a reference to a secret, in the run's environment and a task's.
    ref = {"$ref": "#/$defs/SecretRef"}
    for where in (schema["$defs"]["PipelineDocument"], task):
        assert ref in where["properties"]["environment"]["additionalProperties"]["anyOf"]
    assert schema["$defs"]["SecretRef"]["required"] == ["secret"]


def test_a_secret_reference_travels_by_name_and_the_tasks_own_environment_wins() -> None:
    """The run's ``{secret: hf}`` and a task's own clear value of another variable reach
    the task's session request: the secret by name (never a value, none known here), the
    clear one in its command; a task's own variable of a run's name replaces it."""
    text = "environment: {HF: {secret: hf}, MODE: run, KEY: {secret: old}}\n" + _task(
        "    command: x\n    environment: {MODE: task, KEY: {secret: new}}\n"
    )
    spec, problems = check_text(text, "alice")
    assert spec is not None and problems == []
    e = draft_request(spec, spec.tasks[0], "alice")
    assert e.secret_env == (("HF", "hf"), ("KEY", "new"))
    assert "MODE=task" in e.command and not any("HF=" in a or "KEY=" in a for a in e.command)


def test_a_serve_tasks_replicas_get_the_runs_secrets_by_name() -> None:
    """The run's ``{secret: hf}`` and a serve task's own reach the revision the task asks
    for, by name and sorted; its clear variables stay clear, none of them a secret's."""
    text = "environment: {HF: {secret: hf}, MODE: run}\n" + _task(
        "    kind: serve\n    serve: {endpoint: e}\n    environment: {DB: {secret: db}}\n"
    )
    spec, problems = check_text(text, "alice")
    assert spec is not None and problems == []
    run = SimpleNamespace(owner="alice", run_id="r1", project=None)
    c = serve_command(spec, spec.tasks[0], {}, run, "ep-1")
    assert isinstance(c, CreateEndpoint)
    assert c.revision.secret_env == (("DB", "db"), ("HF", "hf"))
    assert ("MODE", "run") in c.revision.env
    assert not {k for k, _ in c.revision.env} & {"DB", "HF"}
    assert secret_problems(spec, {"hf"}) == [
        "tasks.a.environment.DB: no secret db of yours (fgpu secret set db)"
    ]
