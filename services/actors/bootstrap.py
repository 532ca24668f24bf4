"""The tenancy a cluster starts with: a domain, a project and a superadmin with a keypair.

Written once, by an administrator's step (``fgpu up`` at its first start, or ``fgpu admin
init``), straight onto ``fgpu.tenancy`` as changes the system made: there is nobody yet
whose role a registrar could check. Only on a log whose tenancy ledger is empty: a second
start finds it written and changes nothing.
"""

from contextlib import aclosing
from dataclasses import dataclass

from events import (
    AdminApplied,
    AdminCommand,
    AnyEvent,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    Role,
    SecretsKeySet,
)
from events import subjects as subj
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.provenance import Provenance, new_id, stamp
from services.domain.tenancy.admin import DEFAULT
from services.ports import Clock, ConcurrencyConflict, EventLog

__all__ = ["FirstAdmin", "bootstrap", "publish_secrets_key", "system_applied"]

SYSTEM = "system"


@dataclass(frozen=True)
class FirstAdmin:
    """The superadmin's keypair, whose secret is known here and nowhere on the log."""

    user: str
    access_key: str
    secret: str


async def bootstrap(
    events: EventLog,
    clock: Clock,
    *,
    user: str = "admin",
    extra: tuple[AdminCommand, ...] = (),
) -> FirstAdmin | None:
    """Give an empty tenancy its ``default`` domain and project, a superadmin ``user`` with
    a new keypair, and ``extra`` commands; the keypair, or None if the log has a tenancy
    already (nothing is written then). Raises LogError."""
    admin = FirstAdmin(user, new_access_key(), new_secret())
    commands: list[AdminCommand] = [
        CreateDomain(domain=DEFAULT),
        CreateProject(domain=DEFAULT, project=DEFAULT),
        CreateUser(
            user=user,
            domain=DEFAULT,
            role=Role.SUPERADMIN,
            projects=(DEFAULT,),
            default_project=DEFAULT,
        ),
        CreateKeypair(
            access_key=admin.access_key, user=user, secret_hash=hash_secret(admin.secret)
        ),
        *extra,
    ]
    correlation = new_id()
    items: list[tuple[str, AnyEvent]] = [
        (subj.TENANCY, system_applied(c, clock, correlation)) for c in commands
    ]
    try:
        await events.append_batch(items, expect_subject=subj.TENANCY, expected_last_subject_seq=0)
    except ConcurrencyConflict:
        return None
    return admin


def system_applied(
    command: AdminCommand, clock: Clock, correlation_id: str | None = None
) -> AdminApplied:
    """``command`` as a change the system made (an administrator's step, not a request)."""
    prov = Provenance(SYSTEM, clock.now(), None, correlation_id)
    return stamp(AdminApplied, prov, requester=SYSTEM, command=command)


async def publish_secrets_key(events: EventLog, clock: Clock, public_key: bytes) -> bool:
    """Say on the tenancy ledger that secrets are sealed to ``public_key``, unless the
    latest key it holds is that one already; whether it wrote. Expects the ledger's last
    sequence, so a change by another writer meanwhile is a ConcurrencyConflict (the
    caller starts again). Raises LogError."""
    target = await events.count(subj.TENANCY)
    latest: bytes | None = None
    last_seq, seen = 0, 0
    if target:
        async with aclosing(events.tail(0, subject=subj.TENANCY)) as batches:
            async for batch in batches:
                for r in batch:
                    last_seq = r.seq
                    if isinstance(r.event, SecretsKeySet):
                        latest = r.event.public_key
                seen += len(batch)
                if seen >= target:
                    break
    if latest == public_key:
        return False
    e = stamp(SecretsKeySet, Provenance(SYSTEM, clock.now()), public_key=public_key)
    await events.append(subj.TENANCY, e, expected_last_subject_seq=last_seq)
    return True
