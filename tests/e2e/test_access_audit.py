"""The access audit: every sign-in and refusal is written or counted, and a flood writes a
bounded number of events (the limiter's property), through the gatekeeper on a real
server (the read API's: ``tests/api/test_api_auth.py``)."""

from collections import Counter, defaultdict
from typing import Any

import anyio
import nats.errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import AccessGranted, AccessRefused, AccessSuppressed, CreateKeypair, CreateUser
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters.nats_server_log import Violation, parse_violation
from services.adapters.system_clock import SystemClock
from services.domain.access.access_audit import ALL_KEYS, AccessLimiter
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.tenancy.admin import DEFAULT
from tests.support.tenancy_env import Secured, secured_cluster

# ---- the limiter ------------------------------------------------------------------------

accesses = st.lists(
    st.tuples(
        st.floats(0, 30),  # seconds since the previous access
        st.sampled_from(["AKa", "AKb", "AKc"]) | st.text("xyz", min_size=1, max_size=6),
        st.booleans(),  # refused
    ),
    max_size=400,
)


@settings(max_examples=200, deadline=None)
@given(accesses, st.integers(1, 5), st.integers(1, 30), st.sampled_from([1.0, 10.0, 60.0]))
def test_every_access_is_written_or_counted_and_a_window_writes_a_bounded_number(
    given_accesses: list[tuple[float, str, bool]], per_key: int, total: int, window: float
) -> None:
    limiter = AccessLimiter(per_key=per_key, total=total, window_s=window)
    now = 0.0
    written: Counter[tuple[str, bool]] = Counter()
    counted: Counter[tuple[str, bool]] = Counter()
    attempts: Counter[bool] = Counter()
    per_window: dict[float, Counter[tuple[str, bool]]] = defaultdict(Counter)
    summaries: dict[float, int] = defaultdict(int)
    start: float | None = None
    for pause, owner, refused in given_accesses:
        now += pause
        attempts[refused] += 1
        ok, due = limiter.admit(now, owner, refused=refused)
        for s in due:
            counted[s.owner, False] += s.granted
            counted[s.owner, True] += s.refused
            summaries[s.since] += 1
            assert s.owner == ALL_KEYS or per_key in (
                per_window[s.since][s.owner, False],
                per_window[s.since][s.owner, True],
            )
        if start is None or due or now >= start + window:
            start = now if start is None or now >= start + window else start
        if ok:
            written[owner, refused] += 1
            per_window[start][owner, refused] += 1
    for s in limiter.due(float("inf")):
        counted[s.owner, False] += s.granted
        counted[s.owner, True] += s.refused
        summaries[s.since] += 1
    for kind in (False, True):
        total_seen = sum(n for (_, r), n in written.items() if r is kind)
        total_seen += sum(n for (_, r), n in counted.items() if r is kind)
        assert total_seen == attempts[kind]
    for owners in per_window.values():
        assert sum(owners.values()) <= total
        assert max(owners.values(), default=0) <= per_key
    assert all(n <= total // per_key + 1 for n in summaries.values())


def test_a_window_that_ends_with_nobody_coming_is_summarised() -> None:
    limiter = AccessLimiter(per_key=1, total=10, window_s=5)
    assert limiter.admit(0, "AKa", refused=True) == (True, [])
    assert limiter.admit(1, "AKa", refused=True) == (False, [])
    assert limiter.due(4.9) == []
    [summary] = limiter.due(5)
    assert (summary.owner, summary.since, summary.granted, summary.refused) == ("AKa", 0, 0, 1)
    assert limiter.due(100) == []


def test_the_server_logs_violations_in_lines_of_known_forms() -> None:
    pub = (
        '[13452] 2026/11/24 00:27:55.343213 [ERR] 127.0.0.1:50866 - cid:18 - "v2.16.0:python3"'
        ' - "FGPU/user:user:ana" - Publish Violation - Subject "fgpu.sched"'
    )
    sub = (
        '[22309] 2026/11/24 00:32:49.385948 [ERR] 127.0.0.1:38022 - cid:56 - "v2.16.0:python3"'
        ' - "FGPU/user:service:agent:a1" - Subscription Violation - Subject "fgpu.>", SID 1'
    )
    assert parse_violation(pub) == Violation(
        18, "127.0.0.1:50866", "user:ana", "publish", "fgpu.sched"
    )
    assert parse_violation(sub) == Violation(
        56, "127.0.0.1:38022", "service:agent:a1", "subscription", "fgpu.>"
    )
    assert parse_violation("[1] 2026/11/24 00:00:00.000000 [INF] Server is ready") is None


# ---- through the doors ------------------------------------------------------------------

anyio_test = pytest.mark.anyio


async def _audit(c: Secured, until: Any) -> list[Any]:
    """The access events on the log, once ``until(events)`` holds (the writes are off the
    doors' path: wait for them)."""
    found: list[Any] = []
    with anyio.fail_after(20):
        async for batch in c.setup.tail(0, subject="fgpu.access.>"):
            found += [r.event for r in batch]
            if until(found):
                return found
    raise AssertionError("the log ended")


@anyio_test
async def test_the_gatekeeper_writes_who_came_in_and_who_was_refused() -> None:
    async with secured_cluster() as c:
        key, secret = new_access_key(), new_secret()
        for command in (
            CreateUser(user="ana", domain=DEFAULT, projects=(DEFAULT,)),
            CreateKeypair(access_key=key, user="ana", secret_hash=hash_secret(secret)),
        ):
            await c.setup.append(subj.TENANCY, system_applied(command, SystemClock()))
        nc = await c.client(key, secret)
        await nc.close()
        with pytest.raises((nats.errors.Error, OSError)):
            await c.client(key, "wrong")
        events = await _audit(c, lambda es: len(es) >= 2)
        granted, refused = events[:2]
        assert isinstance(granted, AccessGranted)
        assert (granted.via, granted.owner, granted.identity) == ("nats", key, "user:ana")
        assert isinstance(refused, AccessRefused)
        assert (refused.owner, refused.what) == (key, "connect")
        assert refused.reason == f"wrong secret for access key {key}"
        assert secret not in repr(events)


@anyio_test
async def test_a_flood_of_refused_logins_writes_a_few_events_and_a_count() -> None:
    limiter = AccessLimiter(per_key=3, total=10, window_s=1.0)
    async with secured_cluster(limiter=limiter) as c:
        flood = 40
        for _ in range(flood):
            with pytest.raises((nats.errors.Error, OSError)):
                await c.client("AKflood", "nope")

        def summarised(es: list[Any]) -> bool:
            return any(isinstance(e, AccessSuppressed) for e in es)

        events = await _audit(c, summarised)
        refused = [e for e in events if isinstance(e, AccessRefused)]
        [summary] = [e for e in events if isinstance(e, AccessSuppressed)]
        assert len(refused) == 3 and {e.owner for e in refused} == {"AKflood"}
        assert (summary.owner, summary.refused, summary.granted) == ("AKflood", flood - 3, 0)
