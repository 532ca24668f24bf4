"""A pipeline's tasks as a graph: the rules it must follow (unique names, known
dependencies, no cycle) and the walks over it (what follows a task)."""

from collections.abc import Iterable, Mapping, Sequence

from events import PipelineTask

__all__ = ["descendants", "find_cycle", "graph_problems"]


def graph_problems(tasks: Sequence[PipelineTask]) -> list[str]:
    """Every problem of the graph, one line each: names used twice, dependencies on no
    task, a cycle (its tasks named in order). Empty: the graph is a DAG."""
    problems: list[str] = []
    seen: set[str] = set()
    for t in tasks:
        if t.name in seen:
            problems.append(f"tasks.{t.name}: the name is used by another task")
        seen.add(t.name)
    for t in tasks:
        for d in t.dependencies:
            if d == t.name:
                problems.append(f"tasks.{t.name}.dependencies: a task cannot depend on itself")
            elif d not in seen:
                problems.append(f"tasks.{t.name}.dependencies: no task is called {d!r}")
        if len(set(t.dependencies)) < len(t.dependencies):
            problems.append(f"tasks.{t.name}.dependencies: a dependency is named twice")
    if not problems:
        cycle = find_cycle({t.name: t.dependencies for t in tasks})
        if cycle is not None:
            path = " -> ".join([*cycle, cycle[0]])
            problems.append(f"tasks: a cycle, each task depending on the next: {path}")
    return problems


def find_cycle(deps: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle of ``deps`` (task -> the tasks it depends on), as its tasks in order of
    dependency (each depends on the next, the last on the first); None if there is none.
    Iterative: a graph thousands deep must not exhaust the stack."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(deps, white)
    for root in deps:
        if colour[root] != white:
            continue
        path: list[str] = [root]
        stack = [iter(deps[root])]
        colour[root] = grey
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
                continue
            c = colour.get(nxt, black)  # an unknown name is graph_problems' to say
            if c == grey:
                return path[path.index(nxt) :]
            if c == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(deps[nxt]))
    return None


def descendants(tasks: Sequence[PipelineTask], start: str) -> list[str]:
    """``start`` and every task that depends on it, directly or not, in the spec's order."""
    after: dict[str, list[str]] = {t.name: [] for t in tasks}
    for t in tasks:
        for d in t.dependencies:
            if d in after:
                after[d].append(t.name)
    found = {start}
    todo = [start]
    while todo:
        for n in after.get(todo.pop(), ()):
            if n not in found:
                found.add(n)
                todo.append(n)
    return [t.name for t in tasks if t.name in found]
