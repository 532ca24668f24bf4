"""Web UI benchmark: the terminal's keystroke round trip, the sessions page's first render
with 10,000 sessions in history, and an event on the log to its change in an open page.

- **Terminal** (on the engine of ``scripts/docker-up``): a busybox session RUNNING on a
  Docker agent; its terminal opened as the browser opens it (sign-in cookie, a ticket by
  a CSRF-checked POST, the WebSocket from this origin), and beside it a direct ``docker
  exec`` of the same login shell with a tty (aiodocker) in the same container. One key at
  a time, alternating between the two, each timed from its send until the shell's echo of
  it comes back: ``ratio_terminal_to_docker_exec`` of the p50s (goal <= 1.5). A third
  shell, the channel ``fgpu session shell`` opens (over the user's own NATS connection to
  the agent: what the web terminal relays, without the browser's WebSocket), alternated
  with them, says which part is the web's: ``ratio_terminal_to_shell_channel``.
- **First render**: a log of its own filled with a synthetic history (bench/rebuild.py's)
  of 10,000 sessions (400 of them alive), folded by the read API; its superadmin, who sees
  them all, signed in in headless Chromium. From a navigation to the page until its first
  rows are shown (``performance.now()`` in the page, polled: a few ms late at worst), the
  median and the worst of ``--tries`` (goal <= 1 s); and, the page shown, from a click on
  the "ended" filter until its first rows (the server pages 9,600 ended sessions, 50 a
  page).
- **Event to page**: on that page, a MutationObserver stamps each row as it appears
  (``performance.timeOrigin + performance.now()``, the host's wall clock, which Python's
  ``time.time()`` reads on the same host); a session asked for is appended to the log,
  stamped before the append, one at a time, each awaited: p50 / p99 (goal p99 <= 200 ms).

- **NATS floor**: one message there and back between two nats-py connections through a
  local nats-server, nothing else done (``nats_echo_ms``): what any channel through NATS
  costs at least, the shell channel's two traversals included.

The host's load average is in the line: these are shared 2-core machines.

Prints one JSON line. Usage: python bench/web.py [--keys 200] [--events 100] [--tries 5]
"""

import argparse
import asyncio
import functools
import json
import os
import queue
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiodocker
import anyio
import nats
import websocket
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream
from rebuild import fill, quantiles_ms, synthetic_log  # bench/rebuild.py, beside this file

from events import SessionRequested, SessionRunning, Slots
from events import subjects as subj
from services.actors.bootstrap import FirstAdmin, bootstrap
from services.adapters import nats_server
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.api.browser import COOKIE
from services.api.serve import ReadApi, serve_read_api
from services.domain.channels import shell_program
from services.domain.container_spec import LABEL_SESSION
from services.wiring.acting import acting_on
from tests.support.browser import chrome
from tests.support.cli_stack import remove_agent_containers
from tests.support.ui_pages import SessionsPage
from tests.support.ui_world import UiWorld, ui_world

AGENTS = 100
HISTORY = 72_000 + AGENTS  # events of the synthetic history: 10,000 sessions and more
SHELL = list(shell_program(24, 80, "xterm").argv)

# ---- the terminal ---------------------------------------------------------------------


def _ready(send: Callable[[bytes], None], read: Callable[[], bytes]) -> None:
    """Once the shell answers: ``ready`` echoed (the command typed reads ``rea""dy``)."""
    send(b'echo rea""dy\r')
    seen = b""
    while b"ready\r" not in seen:
        seen += read()


# Keys found in no prompt or terminal query (``/ # ``, ``\x1b[6n``): a key's echo is its own.
KEYS = b"qzxkjvw"


def _echo_ms(send: Callable[[bytes], None], read: Callable[[], bytes], key: bytes) -> float:
    t0 = time.perf_counter()
    send(key)
    seen = b""
    while key not in seen:
        seen += read()
    return (time.perf_counter() - t0) * 1000


def _web_terminal(w: UiWorld, sid: str) -> websocket.WebSocket:
    http, csrf = w.sign_in("alice")
    ticket = http.post(
        f"/ui/sessions/{sid}/shell-ticket", headers={"Origin": w.url, "X-CSRF-Token": csrf}
    ).json()["ticket"]
    ws = websocket.WebSocket()
    url = w.url.replace("http://", "ws://") + f"/ui/sessions/{sid}/shell?ticket={ticket}"
    ws.connect(url, origin=w.url, cookie=f"{COOKIE}={http.cookies[COOKIE]}", timeout=30)
    return ws


async def _docker_exec(sid: str) -> tuple[Any, Any]:
    """The same login shell, by ``docker exec`` with a tty, in the session's container."""
    docker = aiodocker.Docker()
    [box] = await docker.containers.list(filters={"label": [f"{LABEL_SESSION}={sid}"]})
    run = await box.exec(cmd=SHELL, stdin=True, tty=True, environment={"TERM": "xterm"})
    stream = run.start(detach=False)
    return docker, stream


class _QueueEnd:
    """A terminal's end for the shell channel itself: keys from a stream, output into a
    queue the benchmark's thread reads."""

    def __init__(self, keys: MemoryObjectReceiveStream[bytes], out: "queue.Queue[bytes]") -> None:
        self._keys, self._out = keys, out

    async def read(self) -> bytes | None:
        try:
            return await self._keys.receive()
        except anyio.EndOfStream:
            return None

    async def write(self, data: bytes) -> None:
        self._out.put(data)

    def size(self) -> tuple[int, int]:
        return (24, 80)


@contextmanager
def _channel(
    w: UiWorld, agent: str, sid: str
) -> Iterator[tuple[Callable[[bytes], None], Callable[[], bytes]]]:
    """The shell channel ``fgpu session shell`` opens, over alice's own NATS connection
    (what the web terminal relays, without the browser's WebSocket): send and read."""
    keys_in, keys_out = anyio.create_memory_object_stream[bytes](16)
    no_sizes, sizes = anyio.create_memory_object_stream[tuple[int, int]](1)
    out: queue.Queue[bytes] = queue.Queue()

    async def run() -> None:
        acting = await acting_on(w.c.url)(*w.keys["alice"])
        try:
            await acting.shell(agent, sid, _QueueEnd(keys_out, out), sizes)
        finally:
            await acting.aclose()

    done = w.portal.start_task_soon(run)
    try:
        yield (lambda b: w.portal.call(keys_in.send, b)), (lambda: out.get(timeout=30))
    finally:
        w.portal.call(keys_in.send, b"exit\r")
        w.portal.call(keys_in.aclose)
        w.portal.call(no_sizes.aclose)
        done.cancel()  # the channel itself is measured, not how it closes


async def _nats_echo_ms(keys: int) -> list[float]:
    """The floor of any channel through NATS: one message there and back between two
    nats-py connections through a local nats-server (one echoes), nothing else done."""
    with nats_server.nats_server() as server:
        mine, theirs = await nats.connect(server.url), await nats.connect(server.url)
        try:
            came: asyncio.Queue[bytes] = asyncio.Queue()

            async def echo(m: Any) -> None:
                await theirs.publish("down", m.data)

            async def got(m: Any) -> None:
                came.put_nowait(m.data)

            await theirs.subscribe("up", cb=echo)
            await mine.subscribe("down", cb=got)
            await mine.flush()
            await theirs.flush()
            times = []
            for _ in range(keys + 20):  # the first 20 warm up
                t = time.perf_counter()
                await mine.publish("up", b"k")
                await asyncio.wait_for(came.get(), 30)
                times.append((time.perf_counter() - t) * 1000)
            return times[20:]
        finally:
            await mine.close()
            await theirs.close()


def terminal(keys: int) -> dict[str, Any]:
    """Round trips of ``keys`` keys each way, alternated (see the module's docstring)."""
    agent = f"bench-{uuid.uuid4().hex[:8]}"
    services = ("intake", "registrar", "quota", "scheduler", f"agent:{agent}")
    loop = asyncio.new_event_loop()
    try:
        with ui_world(Path(tempfile.mkdtemp()), services, DockerRuntime) as w:
            sid = w.sessions["alice"]
            w.wait_until(sid, SessionRunning)
            _say("terminal: the session runs")
            ws = _web_terminal(w, sid)
            docker, stream = loop.run_until_complete(_docker_exec(sid))

            def web_read() -> bytes:
                data = ws.recv()
                return data if isinstance(data, bytes) else data.encode()

            def exec_read() -> bytes:
                msg = loop.run_until_complete(asyncio.wait_for(stream.read_out(), 30))
                assert msg is not None, "docker exec's shell ended"
                return bytes(msg.data)

            def web_send(b: bytes) -> None:
                ws.send(b, websocket.ABNF.OPCODE_BINARY)

            def exec_send(b: bytes) -> None:
                loop.run_until_complete(stream.write_in(b))

            with _channel(w, agent, sid) as (channel_send, channel_read):
                _say("terminal: the three shells open")
                _ready(web_send, web_read)
                _ready(exec_send, exec_read)
                _ready(channel_send, channel_read)
                _say("terminal: the three at their prompt")
                web, direct, channel = [], [], []
                for i in range(keys):
                    key = KEYS[i % len(KEYS) : i % len(KEYS) + 1]
                    web.append(_echo_ms(web_send, web_read, key))
                    direct.append(_echo_ms(exec_send, exec_read, key))
                    channel.append(_echo_ms(channel_send, channel_read, key))
            ws.close()
            loop.run_until_complete(stream.close())
            loop.run_until_complete(docker.close())
    finally:
        remove_agent_containers(agent)
        loop.close()
    ours, theirs = quantiles_ms(web), quantiles_ms(direct)
    return {
        "keys": keys,
        "terminal_ms": ours,
        "docker_exec_ms": theirs,
        "shell_channel_ms": quantiles_ms(channel),
        "ratio_terminal_to_shell_channel": round(
            ours["p50_ms"] / quantiles_ms(channel)["p50_ms"], 2
        ),
        "ratio_terminal_to_docker_exec": round(ours["p50_ms"] / theirs["p50_ms"], 2),
        "ratio_p99": round(ours["p99_ms"] / theirs["p99_ms"], 2),
    }


# ---- the sessions page ------------------------------------------------------------------

_FIRST_ROW = """
const rows = document.querySelectorAll(arguments[0]).length;
return rows ? performance.now() : null;
"""
_ROWS = "#session-table tbody tr[data-session]"
_ENDED_ROWS = "#session-table tbody tr[data-ended]"
_OBSERVE = """
window.seen = {};
new MutationObserver((changes) => {
  const now = performance.timeOrigin + performance.now();
  for (const c of changes) for (const n of c.addedNodes) {
    const sid = n.dataset && n.dataset.session;
    if (sid && !(sid in window.seen)) window.seen[sid] = now;
  }
}).observe(document.querySelector("#session-table tbody"), { childList: true });
"""


def _first_rows_ms(page: SessionsPage) -> float:
    """A navigation to the page, until its first rows (ms from the navigation's start)."""
    page.d.get(page.url)
    at: list[float] = []

    def shown(d: Any) -> bool:
        stamp = d.execute_script(_FIRST_ROW, _ROWS)
        at[:] = [] if stamp is None else [float(stamp)]
        return bool(at)

    page.until(shown, "the first rows")
    return at[0]


def _ended_rows_ms(page: SessionsPage) -> float:
    """On a page just shown, the filter moved to the ended sessions, until their first
    rows (ms from the click; the server pages 9,600 of them)."""
    page.d.get(page.url)
    page.until(lambda d: d.execute_script(_FIRST_ROW, _ROWS) is not None, "the first rows")
    t0 = float(page.d.execute_script("return performance.now()"))
    page.d.find_element("css selector", 'input[name="show"][value="ended"]').click()
    at: list[float] = []

    def shown(d: Any) -> bool:
        stamp = d.execute_script(_FIRST_ROW, _ENDED_ROWS)
        at[:] = [] if stamp is None else [float(stamp)]
        return bool(at)

    page.until(shown, "the first ended rows")
    return at[0] - t0


@dataclass
class History:
    """A log on a server of its own (no authentication: the synthetic history's actors
    publish on their own subjects), a tenancy with its superadmin, the read API serving the
    UI over it."""

    url: str
    log: JetStreamLog
    root: FirstAdmin
    api: ReadApi
    portal: BlockingPortal


async def _serve_history(
    tmp: Path, *, task_status: TaskStatus[tuple[JetStreamLog, FirstAdmin, ReadApi, int]]
) -> None:
    with nats_server.nats_server() as server:
        log = await connect(server.url, name="bench-web")
        await log.create_or_update_stream()
        root = await bootstrap(log, SystemClock())
        assert root is not None
        sent = await fill(log, HISTORY, agents=AGENTS)
        last = await log.last_seq()
        async with anyio.create_task_group() as tg:
            serve = functools.partial(serve_read_api, act=acting_on(server.url))
            api = await tg.start(serve, log, tmp / "p.duckdb")
            await api.projector.wait_beyond(last - 1)
            task_status.started((log, root, api, sent))
            await anyio.sleep_forever()


@contextmanager
def history(tmp: Path) -> Iterator[tuple[History, int]]:
    """The history served; and how many events it holds."""
    with start_blocking_portal("asyncio") as portal:
        running, (log, root, api, sent) = portal.start_task(_serve_history, tmp)
        try:
            yield History(api.url, log, root, api, portal), sent
        finally:
            running.cancel()


def _sessions_in_history() -> int:
    """How many sessions the synthetic history holds (each admitted once by the quota)."""
    quota = subj.quota("")
    return sum(s.startswith(quota) for s, _ in synthetic_log(HISTORY, agents=AGENTS))


def _append_request(w: History, owner: str) -> tuple[str, float]:
    """A session asked for, appended to the log; its id and when it was sent (epoch ms)."""
    sid = f"sweb{uuid.uuid4().hex[:10]}"
    rid = uuid.uuid4().hex
    e = SessionRequested(
        id=rid,
        at=datetime.now(UTC),
        actor=owner,
        causation_id=rid,
        correlation_id=rid,
        session_id=sid,
        owner=owner,
        image="fgpu/busybox:latest",
        slots=Slots(cpu=100, mem=1 << 28, fgpu=10),
    )
    sent = time.time() * 1000

    async def append() -> None:
        await w.log.append(subj.request(owner, sid), e)

    w.portal.call(append)
    return sid, sent


def _seen_at(page: SessionsPage, sid: str) -> float:
    """When the page's observer saw ``sid``'s row appear (epoch ms), once it has."""
    at: list[float] = []

    def seen(d: Any) -> bool:
        stamp = d.execute_script("return window.seen[arguments[0]]", sid)
        at[:] = [float(stamp)] if stamp else []
        return bool(at)

    page.until(seen, f"{sid} on the page")
    return at[0]


def _event_lags(w: History, page: SessionsPage, events: int) -> list[float]:
    """Each of ``events`` sessions asked for on the log, one at a time: ms from its append
    to its row on the open page."""
    page.d.get(page.url)
    page.until(lambda d: d.execute_script(_FIRST_ROW, _ROWS) is not None, "rows")
    page.until(lambda d: page.css("#live-status") == ["live"], "the live stream open")
    page.d.execute_script(_OBSERVE)
    lags = []
    for _ in range(events):
        sid, sent = _append_request(w, w.root.access_key)
        lags.append(_seen_at(page, sid) - sent)
    return lags


def page(tries: int, events: int) -> dict[str, Any]:
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must never fetch a driver
    tmp = Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    with history(tmp) as (w, seq):
        filled_s = time.perf_counter() - t0
        _say(f"page: history folded in {filled_s:.1f} s")
        driver = chrome(tmp / "chromium", 1200, 900)
        try:
            p = SessionsPage(driver, f"{w.url}/")
            root = w.root
            p.sign_in(root.access_key, root.secret, root.user)
            live = [_first_rows_ms(p) for _ in range(tries)]
            ended = [_ended_rows_ms(p) for _ in range(tries)]
            lags = _event_lags(w, p, events)
        finally:
            driver.quit()
    return {
        "sessions": _sessions_in_history(),
        "history_events": seq,
        "history_fill_s": round(filled_s, 1),
        "first_render_ms": _median(live),
        "first_render_ms_max": round(max(live), 1),
        "ended_filter_ms": _median(ended),
        "event_to_page_ms": quantiles_ms(lags),
    }


def _say(what: str) -> None:
    print(f"web bench: {what}", file=sys.stderr, flush=True)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def main(args: argparse.Namespace) -> dict[str, Any]:
    load = os.getloadavg()
    result: dict[str, Any] = {"bench": "web", "cores": os.cpu_count()}
    result |= terminal(args.keys)
    result["nats_echo_ms"] = quantiles_ms(asyncio.run(_nats_echo_ms(args.keys)))
    result |= page(args.tries, args.events)
    result["load_avg_1m"] = [round(load[0], 1), round(os.getloadavg()[0], 1)]  # start, end
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--tries", type=int, default=5)
    print(json.dumps(main(parser.parse_args())))
    sys.stdout.flush()
