"""The read API over real projections of a real log, served by uvicorn on a free port.

The scenario is the README's: one GPU split into 2 fGPU, alice asks for three sessions of
1 fGPU (two run, one waits), destroys a running one (the waiting one runs), and bob asks
for more than any agent has (rejected). Every answer is checked against the fold of the
same log.
"""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.api import ReadApi, serve_read_api
from services.client import Client
from services.domain.fold.state import fold
from tests.support.scenario import Scenario, log_records, run_scenario

pytestmark = pytest.mark.anyio


@pytest.fixture
async def served(
    log: JetStreamLog, tmp_path: Path
) -> AsyncIterator[tuple[ReadApi, Scenario, JetStreamLog]]:
    scenario = await run_scenario(log)
    async with anyio.create_task_group() as tg:
        api: ReadApi = await tg.start(serve_read_api, log, tmp_path / "p.duckdb")
        yield api, scenario, log
        tg.cancel_scope.cancel()


async def _get(api: ReadApi, path: str, **params: Any) -> Any:
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as http:
        r = await http.get(path, params=params)
    assert r.headers["content-type"].startswith("application/json"), r.text
    return r.status_code, r.json()


async def _ok(api: ReadApi, path: str, **params: Any) -> Any:
    code, body = await _get(api, path, **params)
    assert code == 200, body
    return body


async def test_sessions_filters_and_pages(
    served: tuple[ReadApi, Scenario, JetStreamLog],
) -> None:
    api, sc, _ = served
    code, body = await _get(api, "/v1/sessions")
    assert code == 200 and body["total"] == 4
    assert {s["id"] for s in body["sessions"]} == {*sc.ids, sc.big}
    body = await _ok(api, "/v1/sessions", status=["RUNNING"])
    assert {s["id"] for s in body["sessions"]} == {i for i in sc.ids if i != sc.victim}
    body = await _ok(api, "/v1/sessions", status=["REJECTED", "TERMINATED"])
    assert {s["id"] for s in body["sessions"]} == {sc.victim, sc.big}
    body = await _ok(api, "/v1/sessions", owner="bob")
    (rejected,) = body["sessions"]
    assert rejected["status"] == "REJECTED"
    assert rejected["reason"] == sc.final.sessions[sc.big].reason
    body = await _ok(api, "/v1/sessions", agent="a1")
    assert body["total"] == 3
    pages = []
    for offset in range(4):
        body = await _ok(api, "/v1/sessions", limit=1, offset=offset)
        pages += [s["id"] for s in body["sessions"]]
    assert sorted(pages) == sorted([*sc.ids, sc.big])


async def test_a_session_and_its_story(served: tuple[ReadApi, Scenario, JetStreamLog]) -> None:
    api, sc, _ = served
    code, s = await _get(api, f"/v1/sessions/{sc.waited}")
    view = sc.final.sessions[sc.waited]
    assert code == 200
    assert (s["status"], s["agent"], s["owner"], s["name"]) == ("RUNNING", "a1", "alice", "train")
    assert s["devices"] == [{"gpu": 0, "fgpu": "1"}] and s["requested"]["fgpu"] == "1"
    assert s["waiting"] == view.waiting and s["holds_allocation"]
    times = s["times"]
    assert times["requested"] <= times["admitted"] <= times["scheduled"] <= times["running"]
    h = await _ok(api, f"/v1/sessions/{sc.waited}/history")
    assert [t["status"] for t in h["transitions"]] == [t.status.value for t in view.history]
    text = "\n".join(line["text"] for line in h["story"])
    assert "alice asked for 1 fGPU" in text
    assert f"it waits: {view.waiting}" in text
    assert "placed on a1 (gpu0 1 fGPU) after waiting" in text
    assert "running on a1" in text
    assert h["summary"].startswith("running on a1")
    h = await _ok(api, f"/v1/sessions/{sc.victim}/history")
    text = "\n".join(line["text"] for line in h["story"])
    assert "alice asked to destroy it" in text and "ended with exit code" in text
    for path in (f"/v1/sessions/{sc.big}x", f"/v1/sessions/{sc.big}x/history"):
        code, body = await _get(api, path)
        assert code == 404 and "no session" in body["detail"]


async def test_agents_and_usage(served: tuple[ReadApi, Scenario, JetStreamLog]) -> None:
    api, sc, _ = served
    body = await _ok(api, "/v1/agents")
    (a1,) = body["agents"]
    (gpu,) = a1["gpus"]
    running = {i for i in sc.ids if i != sc.victim}
    assert {s["session"] for s in gpu["shares"]} == running
    assert {s["owner"] for s in gpu["shares"]} == {"alice"}
    assert (gpu["capacity"], gpu["allocated"], gpu["free"]) == ("2", "2", "0")
    assert a1["allocated"]["fgpu"] == "2" and a1["sessions"] == 2
    same = await _ok(api, "/v1/agents/a1")
    assert same == a1
    code, body = await _get(api, "/v1/agents/nope")
    assert code == 404 and body["detail"] == "no agent 'nope'"
    u = await _ok(api, "/v1/usage")
    assert (u["capacity"]["fgpu"], u["allocated"]["fgpu"], u["free"]["fgpu"]) == ("2", "2", "0")
    assert u["agents"][0]["gpus"] == [{"index": 0, "capacity": "2", "allocated": "2", "free": "0"}]
    owners = {o["owner"]: o for o in u["owners"]}
    assert owners["alice"]["sessions"] == 2 and owners["alice"]["allocated"]["fgpu"] == "2"
    assert owners["alice"]["quota_sessions"] == 2
    assert owners.get("bob", {"sessions": 0})["sessions"] == 0


async def test_events_by_sequence_and_time(
    served: tuple[ReadApi, Scenario, JetStreamLog],
) -> None:
    api, sc, log = served
    records = await log_records(log)
    seen: list[int] = []
    after = 0
    while True:
        page = await _ok(api, "/v1/events", after=after, limit=7)
        if not page["events"]:
            break
        seen += [e["seq"] for e in page["events"]]
        after = page["next_after"]
    assert seen == [r.seq for r in records]
    page = await _ok(api, "/v1/events", session=sc.waited, limit=1000)
    kinds = [e["type"] for e in page["events"]]
    assert kinds[0] == "session.requested.v1" and "session.queued.v1" in kinds
    assert all(e["data"]["session_id"] == sc.waited for e in page["events"])
    middle = page["events"][2]
    ranged = await _ok(api, "/v1/events", since=middle["at"], until=middle["at"])
    assert middle["seq"] in [e["seq"] for e in ranged["events"]]
    mine = await _ok(api, "/v1/events", owner="bob", limit=1000)
    assert {e["session_id"] for e in mine["events"]} == {sc.big}
    typed = await _ok(api, "/v1/events", type=["session.rejected.v1"], limit=1000)
    assert [e["session_id"] for e in typed["events"]] == [sc.big]


async def test_time_travel_is_the_fold_of_the_log(
    served: tuple[ReadApi, Scenario, JetStreamLog],
) -> None:
    api, sc, log = served
    records = await log_records(log)
    truth = fold(records[: sc.busy_seq])
    code, past = await _get(api, "/v1/state", seq=sc.busy_seq)
    assert code == 200 and past["seq"] == sc.busy_seq
    live = {s["id"]: s["status"] for s in past["sessions"]}
    assert live == {i: truth.sessions[i].status.value for i in sc.ids}
    assert past["counts"] == {"PENDING": 1, "RUNNING": 2}
    (gpu,) = past["agents"][0]["gpus"]
    assert {s["session"]: s["fgpu"] for s in gpu["shares"]} == {
        i: "1" for i, v in truth.sessions.items() if v.status.value == "RUNNING"
    }
    # By time: the instant of that event, then a millisecond before the first one.
    at = records[sc.busy_seq - 1].event.at  # type: ignore[union-attr]
    same = await _ok(api, "/v1/state", at=at.isoformat())
    assert same["seq"] >= sc.busy_seq and same["at"] is not None
    empty = await _ok(api, "/v1/state", at="2000-01-01T00:00:00Z")
    assert (empty["seq"], empty["sessions"], empty["agents"]) == (0, [], [])
    now = await _ok(api, "/v1/state")
    assert now["seq"] == len(records)
    assert now["counts"] == {"RUNNING": 2, "TERMINATED": 1, "REJECTED": 1}
    # One shape: a session of the fold's state is the session its projection row gives.
    for session in now["sessions"]:
        assert session == await _ok(api, f"/v1/sessions/{session['id']}")


async def test_bad_parameters_get_4xx_with_a_message(
    served: tuple[ReadApi, Scenario, JetStreamLog],
) -> None:
    api, _, _ = served
    for path, params in [
        ("/v1/sessions", {"limit": 0}),
        ("/v1/sessions", {"status": "SLEEPING"}),
        ("/v1/sessions", {"offset": -1}),
        ("/v1/events", {"after": "x"}),
        ("/v1/events", {"after": str(1 << 70)}),
        ("/v1/events", {"since": "yesterday"}),
        ("/v1/state", {"at": "noon"}),
        ("/v1/state", {"seq": -1}),
        ("/v1/state", {"seq": 1, "at": "2025-01-01T00:00:00Z"}),
        ("/v1/state", {"at": "9999-12-31T23:59:59-05:00"}),
    ]:
        code, body = await _get(api, path, **params)
        assert code == 422, (path, params, body)
        assert isinstance(body["detail"], str) and body["detail"], body
    code, body = await _get(api, "/v1/state", seq=10**9)
    assert code == 404 and "beyond" in body["detail"]
    async with httpx.AsyncClient(base_url=api.url) as http:
        r = await http.get("/v1/events/stream", headers={"Last-Event-ID": "soon"})
    assert r.status_code == 400 and "Last-Event-ID" in r.json()["detail"]


async def _sse(
    api: ReadApi, n: int, *, after: int | None = None, last_id: int | None = None
) -> list[tuple[int, str, dict[str, Any]]]:
    """The first ``n`` events of a fresh stream connection."""
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    params = {} if after is None else {"after": after}
    out: list[tuple[int, str, dict[str, Any]]] = []
    async with (
        httpx.AsyncClient(base_url=api.url, timeout=20) as http,
        http.stream("GET", "/v1/events/stream", params=params, headers=headers) as r,
    ):
        assert r.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        async for line in r.aiter_lines():
            if line == "":
                if "id" in fields:
                    out.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
                    if len(out) == n:
                        return out
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
    raise AssertionError("the stream ended")


async def test_the_event_stream_resumes_with_no_gap_and_no_duplicate(
    served: tuple[ReadApi, Scenario, JetStreamLog],
) -> None:
    api, sc, log = served
    total = len(await log_records(log))
    with anyio.fail_after(20):
        first = await _sse(api, 5)
        assert [seq for seq, _, _ in first] == [1, 2, 3, 4, 5]
        assert first[0][1] == first[0][2]["type"]
        rest = await _sse(api, total - 5, last_id=5)
        assert [seq for seq, _, _ in rest] == list(range(6, total + 1))
        # Live: a stream waiting at the end of the log gets the next record as it comes.
        async with (
            httpx.AsyncClient(base_url=api.url, timeout=20) as http,
            http.stream("GET", "/v1/events/stream", params={"after": total}) as r,
        ):
            lines = r.aiter_lines()
            assert await anext(lines) == "retry: 1000"  # connected, at the end
            await Client(log, SystemClock(), "alice").destroy(sc.waited)
            got = await _next_message(lines)
        assert got[0] == f"id: {total + 1}" and got[1] == "event: session.destroy-requested.v1"
        assert json.loads(got[2].removeprefix("data: "))["session_id"] == sc.waited


async def _next_message(lines: AsyncIterator[str]) -> list[str]:
    """The lines of the next SSE message (blank lines before it are skipped)."""
    out: list[str] = []
    async for line in lines:
        if line:
            out.append(line)
        elif out:
            break
    return out


async def test_openapi_and_the_console_are_served(
    served: tuple[ReadApi, Scenario, JetStreamLog],
) -> None:
    api, _, _ = served
    code, doc = await _get(api, "/openapi.json")
    assert code == 200
    for path in ("/v1/sessions", "/v1/sessions/{session_id}/history", "/v1/state", "/v1/usage"):
        assert path in doc["paths"]
    async with httpx.AsyncClient(base_url=api.url) as http:
        page = await http.get("/console")
    assert page.status_code == 200 and "fgpu" in page.text
