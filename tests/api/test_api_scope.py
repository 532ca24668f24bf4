"""Every read route of the API, called as each kind of viewer, answers nothing of a
tenant the viewer may not see.

The routes are those of the API's own OpenAPI document, so a route added later is called
too. Each is called with every id of the world (``api_world``) its path and query
parameters can take: the viewer's own and everyone else's. Then every answer's body is
searched for the identifiers planted for the tenants the viewer may not see (access keys,
user names, session ids and names, domain, project, group, image and folder names, file
names). The request's own values are taken out of its answer first: a 404 that names the
id it was asked about tells nothing new.

Viewers: ``ualice5r``, a user, sees only herself (and her domain's name and projects);
``ucarol1i``, domain admin of ``doth3z``, sees nothing of ``dlab7q``; the superadmin sees
everything, and must find every identifier somewhere (else the test could not fail).
"""

import io
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.api_world import DOMAINS, PEOPLE, ROOT, World, world

pytestmark = pytest.mark.slow

# Routes this test cannot call, and why: keep it tiny.
UNCALLED: dict[str, str] = {}


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world(tmp_path_factory.mktemp("scope")) as found:
        yield found


def _values(w: World) -> dict[str, list[str]]:
    """What each parameter (by name, path or query) is called with: every id of its kind
    in the world, everyone's."""
    people = [u for u, *_ in PEOPLE] + [ROOT]
    sessions = [s for ids in w.sessions.values() for s in ids]
    requests = [*w.admin_requests.values(), *w.destroys.values()]
    last = w.ok(ROOT, "/v1/events", limit=1)["last_seq"]
    times = [e["at"] for e in w.ok(ROOT, "/v1/events", limit=1000)["events"][:: last // 4 or 1]]
    return {
        "session_id": sessions,
        "id": sessions,
        "session": sessions,
        "request_id": requests,
        "agent_id": ["a1"],
        "agent": ["a1"],
        "owner": [w.keys[u][0] for u in people],
        "vfolder_id": list(w.folders.values()),
        "run_id": list(w.runs.values()),
        "ref": [x for pair in w.endpoints.values() for x in pair],
        "path": list(w.files.values()),
        "seq": [str(n) for n in range(1, last + 1, max(1, last // 12))] + [str(last)],
        "at": times,
        "domain": list(DOMAINS),
        "trash": ["true", "false"],
        "format": ["jsonl", "parquet"],
    }


Call = tuple[str, dict[str, str], dict[str, str]]  # route, path values, query values


def _calls(w: World) -> Iterator[Call]:
    """Every GET route of the schema: once with each choice of its required values, then
    with each value of each optional parameter besides."""
    values = _values(w)
    spec = w.http.get(f"{w.api}/openapi.json").json()
    for route, ops in sorted(spec["paths"].items()):
        op = ops.get("get")
        if op is None or route in UNCALLED:
            continue
        params = [p for p in op.get("parameters", []) if p["in"] in ("path", "query")]
        required = [p for p in params if p.get("required")]
        missing = [p["name"] for p in required if p["name"] not in values]
        assert not missing, f"{route}: no value for {missing}: give some, or list it in UNCALLED"
        fixed = [[(p["name"], p["in"], v) for v in values[p["name"]]] for p in required]
        for chosen in itertools.product(*fixed):
            path = {name: v for name, where, v in chosen if where == "path"}
            query = {name: v for name, where, v in chosen if where == "query"}
            yield route, path, query
            for p in params:
                if not p.get("required") and p["name"] in values:
                    for v in values[p["name"]]:
                        yield route, path, {**query, p["name"]: v}


def _read(w: World, who: str, route: str, path: dict[str, str], query: dict[str, str]) -> str:
    """The answer's body as text, whatever its kind: a Parquet file's rows as JSON, and
    of the event stream what it sends up to the last record the viewer may read now."""
    url = w.api + route.format(**path)
    headers = w.headers(who)
    if route == "/v1/events/stream":
        return _streamed(w, who, url, query, headers)
    r = w.http.get(url, params=query, headers=headers)
    assert r.status_code < 500, (who, route, path, query, r.text)
    if r.headers.get("content-type", "").startswith("application/vnd.apache.parquet"):
        return json.dumps(pq.read_table(io.BytesIO(r.content)).to_pylist(), default=str)
    return r.content.decode("utf-8", errors="replace")


def _streamed(w: World, who: str, url: str, query: dict[str, str], headers: dict[str, str]) -> str:
    seen = [e["seq"] for e in _all_events(w, who)]
    assert seen, f"{who} reads no event: the stream would show nothing"
    lines: list[str] = []
    deadline = time.monotonic() + 60  # keep-alives would keep a stream that never gets there
    with w.http.stream("GET", url, params=query, headers=headers) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("id: ") and int(line[4:]) >= seen[-1]:
                break
            assert time.monotonic() < deadline, f"the stream never sent #{seen[-1]} to {who}"
    return "\n".join(lines)


def _all_events(w: World, who: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after = 0
    while page := w.ok(who, "/v1/events", after=after, limit=1000)["events"]:
        found += page
        after = page[-1]["seq"]
    return found


def _unseen(w: World, who: str) -> set[str]:
    """The identifiers ``who`` may not read: a user sees its own and its domain's name and
    projects; a domain admin its domain's; the superadmin everything."""
    if who == ROOT:
        return set()
    domain = next(d for u, d, *_ in PEOPLE if u == who)
    role = next(r for u, _, r, *_ in PEOPLE if u == who)
    hidden = {w.keys[ROOT][0], ROOT, w.service[0]}
    for other in DOMAINS:
        if other != domain:
            hidden |= w.of_domain(other)
    if role.value == "user":
        groups = DOMAINS[domain][1]
        mine = next(p for u, _, _, p, _ in PEOPLE if u == who)
        for user, d, *_ in PEOPLE:
            if d == domain and user != who:
                hidden |= w.identifiers(user)
        hidden |= {g for g, open_to in groups.items() if mine not in open_to}
    return hidden - w.identifiers(who)


@pytest.mark.parametrize("who", ["ualice5r", "ucarol1i"])
def test_no_answer_carries_what_the_viewer_may_not_see(w: World, who: str) -> None:
    hidden = _unseen(w, who)
    leaks: list[str] = []
    calls = 0
    for route, path, query in _calls(w):
        body = _read(w, who, route, path, query)
        for asked in (*path.values(), *query.values()):
            body = body.replace(asked, "")
        found = sorted(h for h in hidden if h in body)
        if found:
            leaks.append(f"{route} {path} {query}: {found}")
        calls += 1
    assert calls > 100
    assert not leaks, "\n".join(leaks)


def test_the_superadmin_reads_every_identifier(w: World) -> None:
    """The identifiers are there to be found: the superadmin finds each, in the answers
    of the same calls."""
    wanted = set().union(*(w.of_domain(d) for d in DOMAINS)) | {w.keys[ROOT][0], w.service[0]}
    wanted -= set(w.files.values())  # an administrator reads no folder not shared with it
    bodies = [_read(w, ROOT, route, path, query) for route, path, query in _calls(w)]
    everything = "\n".join(bodies)
    assert not sorted(i for i in wanted if i not in everything)


def test_every_route_is_called(w: World) -> None:
    spec = w.http.get(f"{w.api}/openapi.json").json()
    gets = {route for route, ops in spec["paths"].items() if "get" in ops}
    called = {route for route, *_ in _calls(w)}
    assert gets - called == set(UNCALLED)
    assert "/v1/vfolders/{vfolder_id}/files/{path}" in called  # the storage routes too


def test_the_owner_reads_its_own_folder_file(w: World) -> None:
    """A file path in the world is a real one: its owner reads it (so the others' 404s
    are refusals, not misses)."""
    folder = w.folders["ualice5r"]
    r = w.get("ualice5r", f"/v1/vfolders/{folder}/files/{w.files[folder]}")
    assert r.status_code == 200 and r.content == b"what ualice5r keeps"
