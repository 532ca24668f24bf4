"""The aggregate the fold keeps: the cluster's records and the indexes over them.

``ClusterState`` holds the records (``services.domain.records``), the tenancy
(``services.domain.tenancy.model``) and the indexes the fold keeps so that no actor scans
every session (the queue, the running sessions, the fit of agents, the groups' shares, the
workload). Owned by the fold (``services.domain.fold.state``); everyone else reads.
"""

from dataclasses import dataclass, field

from events import (
    AdminRequested,
    LogHealth,
    PolicySet,
    ServeRequested,
    SessionDestroyRequested,
)
from services.domain.fold.fit_index import FitIndex
from services.domain.fold.group_shares import GroupShares
from services.domain.fold.id_set import Answers, IdSet
from services.domain.fold.pending import PendingQueue
from services.domain.fold.running_index import RunningIndex
from services.domain.fold.workload import Workload
from services.domain.records import AgentView, OwnerUsage, SessionView
from services.domain.secrets import SecretBook
from services.domain.serving.state import ServingState
from services.domain.tenancy.model import Tenancy

__all__ = ["ClusterState"]


@dataclass(slots=True)
class ClusterState:
    last_seq: int = 0
    # Records folded. JetStream numbers a stream's records without gaps, so this equals
    # ``last_seq`` exactly when the state holds every record up to it; less, when part
    # of the log's past was read from nowhere (archived out of the stream).
    folded: int = 0
    sessions: dict[str, SessionView] = field(default_factory=dict)
    agents: dict[str, AgentView] = field(default_factory=dict)
    policies: dict[str, PolicySet] = field(default_factory=dict)
    usage: dict[str, OwnerUsage] = field(default_factory=dict)  # quota held per owner
    # Quota held above the keypair: "user:<name>", "project:<domain/project>",
    # "domain:<name>" -> sessions and slots held; and per owner, what is admitted and not
    # yet placed (pending).
    held: dict[str, OwnerUsage] = field(default_factory=dict)
    pending: dict[str, OwnerUsage] = field(default_factory=dict)
    tenancy: Tenancy = field(default_factory=Tenancy)
    admin_requests: dict[str, AdminRequested] = field(default_factory=dict)  # undecided
    # Admin requests answered, and whether the tenancy changed, since the owner last
    # cleared these (with ``changed``): request id -> the answer's sequence, the request,
    # and the refusal's code and reason (None: applied).
    # Serve requests answered by the serving actor are noted here too.
    admin_answered: dict[
        str, tuple[int, AdminRequested | ServeRequested, tuple[str, str] | None]
    ] = field(default_factory=dict)
    tenancy_changed: bool = False
    subject_seq: dict[str, int] = field(default_factory=dict)  # last sequence per subject
    # Work waiting for an actor, kept by the fold so no actor scans every session:
    undecided: dict[str, None] = field(default_factory=dict)  # REQUESTED, for quota
    queue: PendingQueue = field(default_factory=PendingQueue)  # PENDING, for the scheduler
    running: RunningIndex = field(default_factory=RunningIndex)  # RUNNING, by time limits
    destroys: dict[str, SessionDestroyRequested] = field(default_factory=dict)  # unanswered
    # Destroy requests answered (one stored again is not answered again), and why each
    # refused one was.
    destroy_answers: Answers = field(default_factory=Answers)
    # Sessions that ended and were let go of (``forget_ended``): they are in ``sessions``
    # no more, and a second request for one of their ids is ignored as before.
    ended: IdSet = field(default_factory=IdSet)
    # Destroy requests answered since the owner last cleared this (with ``changed``):
    # request id -> the answer's sequence, the request, why it was refused (None: done).
    answered: dict[str, tuple[int, SessionDestroyRequested, str | None]] = field(
        default_factory=dict
    )
    malformed: dict[int, tuple[str, str]] = field(default_factory=dict)  # seq -> subject, error
    fit: FitIndex = field(default_factory=FitIndex)
    shares: GroupShares = field(default_factory=GroupShares)  # what DRF weighs, per group
    # The shapes of recent admitted requests (the fragmentation-aware placement weighs
    # against them) and the agent of the latest placement (round-robin goes on from it).
    workload: Workload = field(default_factory=Workload)
    last_placed: str | None = None
    # The log's health: each server's latest record of the room on its store's disk (the
    # quota actor admits no new session while one is not ok).
    log_space: dict[str, LogHealth] = field(default_factory=dict)
    # Endpoints, their replicas and undecided serve requests (services.domain.serving).
    serving: ServingState = field(default_factory=ServingState)
    # Each owner's secrets, sealed, and the key they are sealed to (services.domain.secrets).
    secrets: SecretBook = field(default_factory=SecretBook)
    # Sessions and agents whose state changed since the owner last cleared these; lets an
    # actor look at what a batch changed instead of everything it knows. Invariant: every
    # change to a session's fields marks it (the projection store rewrites the rows of
    # exactly these sessions, and of their agents: an agent's allocations change only
    # with a session's, its other fields mark ``changed_agents``).
    changed: dict[str, None] = field(default_factory=dict)
    changed_agents: dict[str, None] = field(default_factory=dict)
    # Ids of events applied by this process before the log had them (``apply_decision``)
    # and not yet folded back from it: while one is, the state holds more than the log
    # up to ``last_seq`` (no snapshot is kept of it).
    unconfirmed: dict[str, None] = field(default_factory=dict)
