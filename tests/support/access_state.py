"""A cluster state made by administrators' commands alone."""

from events import (
    AdminCommand,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    Record,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters.system_clock import SystemClock
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold


def tenancy(*commands: AdminCommand) -> ClusterState:
    """The fold of ``commands`` applied on the tenancy ledger: domain lab with project p,
    ana (a user of it) and her keypair AKana first."""
    first = [
        CreateDomain(domain="lab"),
        CreateProject(domain="lab", project="p"),
        CreateUser(user="ana", domain="lab", projects=("p",)),
        CreateKeypair(access_key="AKana", user="ana", secret_hash="scrypt$1$1$1$AA$AA"),
    ]
    records = [
        Record(seq=n, subject=subj.TENANCY, event=system_applied(c, SystemClock()))
        for n, c in enumerate([*first, *commands], 1)
    ]
    return fold(records)
