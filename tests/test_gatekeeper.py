"""The bus with authentication on: the gatekeeper lets in only live keypairs with their
secrets, each with its identity's permissions, and disconnects a revoked one at once."""

import anyio
import nats
import nats.errors
import pytest
from tenancy_env import Secured, secured_cluster

from events import (
    AdminApplied,
    CreateKeypair,
    CreateUser,
    RevokeKeypair,
    SessionAdmitted,
    encode,
)
from events import subjects as subj
from services.adapters.system_clock import SystemClock
from services.domain.keys import hash_secret, new_access_key, new_secret
from services.domain.provenance import Provenance, new_id, stamp
from services.domain.tenancy import DEFAULT

pytestmark = pytest.mark.anyio


async def _user(c: Secured, name: str) -> tuple[str, str]:
    """A user of the default project with a new keypair, applied straight onto the
    tenancy ledger (as the registrar would)."""
    key, secret = new_access_key(), new_secret()
    admin = c.admin()
    for command in (
        CreateUser(user=name, domain=DEFAULT, projects=(DEFAULT,)),
        CreateKeypair(access_key=key, user=name, secret_hash=hash_secret(secret)),
    ):
        await _apply(c, command)
    assert admin is not None
    return key, secret


async def _apply(c: Secured, command: object) -> None:
    from services.adapters.system_clock import SystemClock

    e = stamp(
        AdminApplied, Provenance("system", SystemClock().now()), requester="system", command=command
    )  # type: ignore[arg-type]
    await c.setup.append(subj.TENANCY, e)


async def _refused(c: Secured, key: str, secret: str) -> str:
    with pytest.raises((nats.errors.Error, OSError)) as caught:
        await c.client(key, secret)
    return str(caught.value)


async def test_nobody_without_a_live_keypair_and_its_secret_gets_in() -> None:
    async with secured_cluster() as c:
        key, secret = await _user(c, "ana")
        with pytest.raises((nats.errors.Error, OSError)):
            await c.connect()
        await _refused(c, key, "not the secret")
        await _refused(c, "AKnobody", secret)
        nc = await c.client(key, secret)
        assert nc.is_connected
        await nc.close()


async def test_a_user_publishes_its_own_requests_only() -> None:
    async with secured_cluster() as c:
        key, secret = await _user(c, "ana")
        nc = await c.client(key, secret)
        js = nc.jetstream()
        # Its requests go to the intake (which writes them on the log), under its key.
        ack = await js.publish(subj.intake(key), b"[]", timeout=5)
        assert ack.stream == subj.INTAKE_STREAM
        before = await c.setup.last_seq()
        # A decision, another key's request, an admin request in another's name, another
        # key's intake, and its own request straight onto the log: denied.
        denied = (
            subj.LEDGER,
            subj.request("AKother", "s2"),
            subj.admin("AKother", "r"),
            subj.intake("AKother"),
            subj.request(key, "s1"),
        )
        for subject in denied:
            await nc.publish(subject, encode(_admitted()))
        await nc.flush()
        with anyio.fail_after(10):
            violations = await c.told("permissions violation", len(denied))
        assert [subj.LEDGER in v for v in violations].count(True) == 1
        assert await c.stored_since(before) == []  # nothing stored
        with pytest.raises(nats.errors.Error):  # denied: no answer comes
            await nc.jetstream(timeout=0.5).delete_stream(subj.STREAM)
        await nc.close()


async def test_a_revoked_keypair_is_disconnected_at_once_and_refused_after() -> None:
    async with secured_cluster() as c:
        key, secret = await _user(c, "ana")
        gone = anyio.Event()

        async def closed() -> None:
            gone.set()

        nc = await c.client(key, secret, disconnected_cb=closed)
        await _apply(c, RevokeKeypair(access_key=key))
        with anyio.fail_after(10):
            await gone.wait()
        await _refused(c, key, secret)
        await nc.close()


@pytest.mark.parametrize(
    ("service", "own", "denied"),
    [
        ("scheduler", subj.LEDGER, (subj.ADMISSION, subj.TENANCY, subj.request("AKany", "s1"))),
        ("quota", subj.ADMISSION, (subj.LEDGER, subj.TENANCY, subj.agent("a1"))),
        ("registrar", subj.TENANCY, (subj.LEDGER, subj.ADMISSION, subj.access("api"))),
        ("agent:a1", subj.agent("a1"), (subj.agent("a2"), subj.LEDGER, subj.ADMISSION)),
        ("agent-host", subj.agent("sim-7"), (subj.LEDGER, subj.ADMISSION, subj.TENANCY)),
        ("api", subj.access("api"), (subj.access("nats"), subj.LEDGER, subj.TENANCY)),
    ],
)
async def test_a_service_publishes_what_it_decides_only(
    service: str, own: str, denied: tuple[str, ...]
) -> None:
    async with secured_cluster(services=(service,)) as c:
        key, secret = c.services[service]
        log = await c.log_as(key, secret)
        try:
            assert await log.append(own, _admitted()) > 0
        finally:
            await log.close()
        nc = await c.client(key, secret)
        before = await c.setup.last_seq()
        for subject in denied:
            await nc.publish(subject, encode(_admitted()))
        await nc.flush()
        with anyio.fail_after(10):
            await c.told("permissions violation", len(denied))
        assert await c.stored_since(before) == []
        await nc.close()


def _admitted() -> SessionAdmitted:
    return SessionAdmitted(
        id=new_id(), at=SystemClock().now(), actor="quota", session_id="s1", owner="x"
    )
