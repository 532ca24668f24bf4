"""A trace replayed through the scheduler, with the fragmentation protocol.

Nodes become agents (registered as a dummy-runtime agent registers itself), tasks become
sessions of one user, each admitted as the quota actor admits it, and the scheduler
actor decides with the chosen policy and a pending timeout of 0: a session that does not
fit is cancelled at once, as the protocol drops a task that does not fit. Tasks arrive
one at a time, each decided before the next (``services.domain.trace`` has the protocol).

Two ways to run it, giving the same placements (``tests/actors/test_sim_replay.py``):

- ``replay``, the fast one: the log's records folded into one state as the actors fold
  them, and the scheduler's own ``decide`` called on it after each admission; its
  decisions folded back as the log would bring them.
- ``replay_on_log``: the real actors (scheduler, quota, and optionally the agents on a
  runtime) following a real ``EventLog``, the driver appending each request and waiting
  for its decision.
"""

from collections.abc import Callable, Sequence
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

import anyio

from events import (
    AgentRegistered,
    AnyEvent,
    GpuInfo,
    Record,
    SessionAdmitted,
    SessionRequested,
    Slots,
)
from events import subjects as subj
from services.actors.agent import AgentActor, AgentConfig
from services.actors.agent_host import AgentHost
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.memory_log import MemoryLog
from services.adapters.virtual_clock import VirtualClock
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from services.domain.provenance import Provenance, stamp
from services.domain.scheduling.allocator import Placement
from services.domain.status import SessionStatus
from services.domain.trace import (
    FGPU_PER_GPU,
    Node,
    Task,
    Timing,
    arrivals,
    capacity,
    outcome,
)
from services.ports import ContainerRuntime, EventLog
from services.sim.timed import Arrival, nearest_rank, replay_timed

__all__ = [
    "IMAGE",
    "OWNER",
    "agent_configs",
    "registration",
    "replay",
    "replay_on_log",
    "report",
    "request_of",
    "session_id",
    "timed_report",
]

IMAGE = "fgpu/busybox:latest"  # one the dummy runtime has
OWNER = "replay"  # the access key every session is asked for by
_GPU_MEM = 16 << 30  # the trace does not say; only the slice inside a container uses it
_EPOCH = datetime(2023, 7, 10, tzinfo=UTC)  # the replay's time: a fixed clock, no waiting


def session_id(i: int) -> str:
    return f"t{i:06d}"


def agent_configs(nodes: Sequence[Node]) -> list[AgentConfig]:
    """An agent of the dummy runtime per node: its CPU, memory and GPUs of its model, each
    worth FGPU_PER_GPU quanta."""
    return [
        AgentConfig(
            agent_id=n.name,
            capacity=Slots(cpu=n.cpu, mem=n.mem),
            gpus=tuple(
                GpuInfo(index=i, uuid=f"GPU-{n.name}-{i}", model=n.model, mem=_GPU_MEM, sm_count=80)
                for i in range(n.gpus)
            ),
            fgpu_per_gpu=FGPU_PER_GPU,
            mock_gpus=True,
            runtime_name="dummy",
        )
        for n in nodes
    ]


def registration(c: AgentConfig) -> AgentRegistered:
    """What the agent of ``c`` appends when it starts on the dummy runtime."""
    fgpu = len(c.gpus) * c.fgpu_per_gpu
    return stamp(
        AgentRegistered,
        Provenance(f"agent:{c.agent_id}", _EPOCH),
        agent_id=c.agent_id,
        capacity=Slots(cpu=c.capacity.cpu, mem=c.capacity.mem, fgpu=fgpu),
        gpus=c.gpus,
        fgpu_per_gpu=c.fgpu_per_gpu,
        images=(IMAGE,),
        runtime=c.runtime_name,
    )


def request_of(i: int, t: Task) -> SessionRequested:
    """The request of the ``i``-th task to arrive: a session of its shape, asked by OWNER."""
    return stamp(
        SessionRequested,
        Provenance(OWNER, _EPOCH),
        session_id=session_id(i),
        owner=OWNER,
        image=IMAGE,
        slots=Slots(cpu=t.cpu, mem=t.mem, fgpu=t.fgpu),
        name=t.name[:128],
        gpu_models=t.gpu_models,
        cpu_only=t.fgpu == 0,
    )


def _decided(s: ClusterState, sid: str) -> Placement | None:
    v = s.sessions[sid]  # placed, and perhaps started since: it keeps its agent
    return None if v.agent_id is None else (v.agent_id, v.devices)


def replay(nodes: Sequence[Node], arrived: Sequence[Task], policy: str) -> list[Placement | None]:
    """Each task's placement (None: it did not fit and was cancelled), in order: the fast
    way, folding and deciding in this process. Raises UnknownPolicy."""
    s = ClusterState()
    seq = 0

    def fold(subject: str, e: AnyEvent) -> None:
        nonlocal seq
        seq += 1
        evolve(s, Record(seq=seq, subject=subject, event=e))

    for c in agent_configs(nodes):
        fold(subj.agent(c.agent_id), registration(c))
    scheduler = SchedulerActor(
        MemoryLog(), VirtualClock(_EPOCH), policy=policy, pending_timeout_s=0
    )
    out: list[Placement | None] = []
    for i, t in enumerate(arrived):
        request = request_of(i, t)
        fold(subj.request(OWNER, request.session_id), request)
        admitted = stamp(
            SessionAdmitted,
            Provenance("quota", _EPOCH, request.id, request.id),
            session_id=request.session_id,
            owner=OWNER,
        )
        fold(subj.ADMISSION, admitted)
        for decision in scheduler.decide(s):
            fold(subj.LEDGER, decision)
        out.append(_decided(s, request.session_id))
        s.changed.clear()
    return out


async def replay_on_log(
    events: EventLog,
    nodes: Sequence[Node],
    arrived: Sequence[Task],
    policy: str,
    *,
    runtime: Callable[[], ContainerRuntime] | None = None,
) -> list[Placement | None]:
    """Each task's placement, as ``replay``, by the real actors on ``events`` (an empty
    log): the quota actor and the scheduler following the log, the agents registered in
    the nodes' order, then, with ``runtime``, run on it (their containers start; that
    changes no placement), and each request appended once the one before is decided.
    Raises UnknownPolicy."""
    configs = agent_configs(nodes)
    clock = VirtualClock(_EPOCH)
    scheduler = SchedulerActor(events, clock, policy=policy, pending_timeout_s=0)
    out: list[Placement | None] = []
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(events, clock).run)
        await tg.start(scheduler.run)
        # After the scheduler started, so that it counts them alive; in the nodes' order,
        # which is the order of registration ties go by.
        for c in configs:
            await events.append(subj.agent(c.agent_id), registration(c))
        if runtime is not None:
            agents = [AgentActor(events, runtime(), clock, c) for c in configs]
            await tg.start(AgentHost(events, agents, durable="replay-agents").run)
        s = ClusterState()
        async with aclosing(events.tail(0)) as batches:
            for i, t in enumerate(arrived):
                request = request_of(i, t)
                await events.append(subj.request(OWNER, request.session_id), request)
                v = None
                while v is None or v.status in (SessionStatus.REQUESTED, SessionStatus.PENDING):
                    for r in await anext(batches):
                        evolve(s, r)
                    v = s.sessions.get(request.session_id)
                out.append(_decided(s, request.session_id))
        tg.cancel_scope.cancel()
    return out


def report(nodes: Sequence[Node], tasks: Sequence[Task], seed: int, policy: str) -> dict[str, Any]:
    """The protocol run for ``seed`` with ``policy`` (the fast way), as ``fgpu sim replay
    --json`` prints it: ``unallocated_gpu_pct`` at 90, 100 and 130 % arrived, and the
    ``curve`` of [arrived %, unallocated %] at each whole percent arrived. Raises
    UnknownPolicy."""
    arrived = arrivals(tasks, nodes, seed)
    placed = [p is not None for p in replay(nodes, arrived, policy)]
    result = outcome(arrived, placed, capacity(nodes))
    return {
        "policy": policy,
        "seed": seed,
        "nodes": len(nodes),
        "gpus": capacity(nodes) // FGPU_PER_GPU,
        "tasks": len(arrived),
        "placed": sum(placed),
        "unallocated_gpu_pct": {k: round(v, 4) for k, v in result.unallocated_gpu_pct.items()},
        "curve": [[level, round(u, 4)] for level, u in result.curve],
    }


def timed_report(
    nodes: Sequence[Node],
    tasks: Sequence[Task],
    timings: Sequence[Timing],
    policies: Sequence[str],
    *,
    load: float = 1.0,
    samples: int = 100,
) -> dict[str, Any]:
    """The trace replayed in time (``services.sim.timed``) with each of ``policies``, as
    ``fgpu sim replay --timed --json`` prints it: each task asked for at its creation
    time divided by ``load`` (``load`` times as many arriving in the same time, each
    holding its share as long as it did), waiting until it fits. Per policy: queue waits,
    counts, and the allocated share of the GPUs while the tasks arrive (up to the last
    arrival: after it every policy only drains the same work), sampled ``samples``
    times. Raises UnknownPolicy."""
    timed = [
        Arrival(request_of(i, t), w.arrival_s / load, w.duration_s)
        for i, (t, w) in enumerate(zip(tasks, timings, strict=True))
    ]
    span = max(a.arrival_s for a in timed)
    agents = [registration(c) for c in agent_configs(nodes)]
    recorded = sorted(w.waited_s for w in timings if w.waited_s is not None)
    return {
        "nodes": len(nodes),
        "gpus": capacity(nodes) // FGPU_PER_GPU,
        "tasks": len(tasks),
        "load": load,
        "span_s": round(span, 3),
        # The recorded cluster's own queue waits (at load 1 that is the same arrivals).
        "recorded_wait_s": {
            "p50": nearest_rank(recorded, 0.5),
            "p99": nearest_rank(recorded, 0.99),
        },
        "policies": {p: replay_timed(agents, timed, p).summary(span, samples) for p in policies},
    }
