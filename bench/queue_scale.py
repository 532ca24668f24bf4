"""Queue scale: 10,000 agents, 100,000 PENDING sessions, and one destroy freeing a share.

In process, through the scheduler actor's own ``decide`` on a state folded as the actors
fold the log (``services.domain.fold.state.evolve``), agents on the dummy runtime (what a
dummy agent appends, folded at once: it starts a session the moment it is placed):

1. a cluster of ``--agents`` agents of 4 GPUs, every GPU held whole by a running session,
   and ``--pending`` sessions queued behind them (a whole GPU, half and a quarter of one,
   in turn), each already told why it waits (``session.queued``), so a round has nothing
   to say until something frees;
2. round cost: ``decide`` on that state, nothing having changed (the round every batch
   of records wakes), median of ``--rounds``; the same with ``--small`` pending (1,000),
   and the ratio;
3. destroy to RUNNING: a running session's owner destroys it; the rounds the log would
   wake follow (the stop order, the agent's end of it, the placement of the queue's head,
   the agent's start), each record folded as it would come back; time from the destroy
   folded to the next pending session RUNNING, ``--destroys`` times; p50, p99.

The clock stands still at the admissions' time: nobody has waited past the reservation
threshold. ``--queue drf`` (or lifo) gives the default group that queue order (100
users share the queue, in turn): a DRF round takes the users' heads. Also the cost of the
scheduler's time-limits check (every 2 s) with the 40,000 running sessions under a
lifetime of a day (``limits_check_ms``). Prints one JSON line. Usage:
python bench/queue_scale.py [--agents 10000] [--pending 100000] [--small 1000]
[--destroys 200] [--rounds 5] [--queue fifo|lifo|drf] [--profile]
"""

import argparse
import cProfile
import gc
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from rebuild import quantiles_ms  # bench/rebuild.py, beside this file

from events import (
    AdminApplied,
    AgentRegistered,
    AnyEvent,
    DevicePlacement,
    GpuInfo,
    GroupSettings,
    QueueOrder,
    Record,
    SessionAdmitted,
    SessionDestroyRequested,
    SessionQueued,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    Slots,
    UpdateGroup,
)
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.memory_log import MemoryLog
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from services.domain.provenance import Provenance, stamp
from services.runtime_tuning import tune_gc

NOW = datetime(2026, 1, 1, tzinfo=UTC)
IMAGE = "fgpu/busybox:latest"
GPUS = 4
PER_GPU = 1000
SLOTS = Slots(cpu=1000, mem=1 << 30, fgpu=PER_GPU)
PENDING_SHAPES = (PER_GPU, PER_GPU // 2, PER_GPU // 4)


class _Clock:
    def now(self) -> datetime:
        return NOW


class Cluster:
    """A state and the scheduler deciding on it; records folded in order."""

    def __init__(self, scheduler: type[SchedulerActor] = SchedulerActor) -> None:
        self.s = ClusterState()
        self.seq = 0
        self.scheduler = scheduler(MemoryLog(), _Clock())

    def fold(self, subject: str, e: AnyEvent) -> None:
        self.seq += 1
        evolve(self.s, Record(seq=self.seq, subject=subject, event=e))

    def ask(self, sid: str, owner: str, slots: Slots) -> SessionRequested:
        r = stamp(
            SessionRequested,
            Provenance(owner, NOW),
            session_id=sid,
            owner=owner,
            image=IMAGE,
            slots=slots,
        )
        self.fold(subj.request(owner, sid), r)
        admitted = stamp(
            SessionAdmitted, Provenance("quota", NOW, r.id, r.id), session_id=sid, owner=owner
        )
        self.fold(subj.ADMISSION, admitted)
        return r

    def agent_reports(self, decisions: list[AnyEvent]) -> list[tuple[str, AnyEvent]]:
        """What the dummy agents append for ``decisions``: a placed session started, a
        stopped one ended (at once)."""
        out: list[tuple[str, AnyEvent]] = []
        for d in decisions:
            prov = Provenance("agent", NOW, d.id, d.correlation_id)
            if isinstance(d, SessionScheduled):
                running = stamp(
                    SessionRunning,
                    prov,
                    session_id=d.session_id,
                    agent_id=d.agent_id,
                    container_id=d.session_id,
                )
                out.append((subj.agent_session(d.agent_id, d.session_id), running))
            elif isinstance(d, SessionTerminating):
                ended = stamp(
                    SessionTerminated,
                    prov,
                    session_id=d.session_id,
                    agent_id=d.agent_id,
                    exit_code=0,
                    reason="destroyed",
                )
                out.append((subj.agent_session(d.agent_id, d.session_id), ended))
        return out

    def round(self) -> list[AnyEvent]:
        """One round as the log wakes it: decide, the decisions folded back, the agents'
        reports to them folded."""
        decisions = self.scheduler.decide(self.s)
        for d in decisions:
            self.fold(subj.LEDGER, d)
        for subject, e in self.agent_reports(decisions):
            self.fold(subject, e)
        self.s.changed.clear()
        self.s.changed_agents.clear()
        return decisions


def build(
    agents: int,
    pending: int,
    scheduler: type[SchedulerActor] = SchedulerActor,
    queue: QueueOrder = QueueOrder.FIFO,
) -> tuple[Cluster, list[str]]:
    """Every GPU of ``agents`` agents held by a running session (their ids returned, in
    order), and ``pending`` sessions queued behind them, each told why it waits; the
    default group in ``queue`` order, best fit, sessions living a day at most."""
    c = Cluster(scheduler)
    # Sessions live a day at most: the limits check has every running session to watch.
    day = GroupSettings(queue=queue, policy="best-fit", default_lifetime_s=86_400)
    order = UpdateGroup(group="default", settings=day)
    c.fold(
        subj.TENANCY,
        stamp(AdminApplied, Provenance("registrar", NOW), requester="root", command=order),
    )
    for i in range(agents):
        gpus = tuple(
            GpuInfo(index=g, uuid=f"GPU-{i}-{g}", model="T4", mem=16 << 30, sm_count=40)
            for g in range(GPUS)
        )
        reg = stamp(
            AgentRegistered,
            Provenance(f"agent:a{i}", NOW),
            agent_id=f"a{i}",
            capacity=Slots(cpu=64_000, mem=256 << 30, fgpu=GPUS * PER_GPU),
            gpus=gpus,
            fgpu_per_gpu=PER_GPU,
            images=(IMAGE,),
            runtime="dummy",
        )
        c.fold(subj.agent(f"a{i}"), reg)
    running = []
    for i in range(agents):
        for g in range(GPUS):
            sid = f"r{i}-{g}"
            r = c.ask(sid, f"u{i % 100}", SLOTS)
            placed = stamp(
                SessionScheduled,
                Provenance("scheduler", NOW, r.id, r.id),
                session_id=sid,
                owner=r.owner,
                agent_id=f"a{i}",
                slots=SLOTS,
                devices=(DevicePlacement(gpu_index=g, fgpu=PER_GPU),),
            )
            c.fold(subj.LEDGER, placed)
            c.fold(*c.agent_reports([placed])[0])
            running.append(sid)
    for j in range(pending):
        sid = f"p{j}"
        fgpu = PENDING_SHAPES[j % len(PENDING_SHAPES)]
        c.ask(sid, f"u{j % 100}", Slots(cpu=1000, mem=1 << 30, fgpu=fgpu))
        c.fold(
            subj.LEDGER,
            stamp(SessionQueued, Provenance("scheduler", NOW), session_id=sid, reason="full"),
        )
    c.s.changed.clear()
    c.s.changed_agents.clear()
    assert not c.round(), "a full cluster has nothing to decide"
    return c, running


def quiet_ms(check: Callable[[ClusterState], list[AnyEvent]], c: Cluster, rounds: int) -> float:
    """The median cost of ``check`` on ``c`` when it has nothing to say: a round
    (``decide``), or the scheduler's check of time limits (``_over_time``, every 2 s however
    quiet the log) with every running session under a lifetime none has reached."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        decisions = check(c.s)
        times.append((time.perf_counter() - t0) * 1000)
        assert not decisions
    return statistics.median(times)


def destroy_to_running(
    c: Cluster, victim: str, placed: list[tuple[str, str]] | None = None
) -> float:
    """Ms from ``victim``'s destroy folded to the next pending session RUNNING; the
    placements made (session, agent) noted in ``placed``."""
    owner = c.s.sessions[victim].owner
    t0 = time.perf_counter()
    d = stamp(SessionDestroyRequested, Provenance(owner, NOW), session_id=victim, requester=owner)
    c.fold(subj.request(owner, victim), d)
    while True:
        decisions = c.round()
        done = [(e.session_id, e.agent_id) for e in decisions if isinstance(e, SessionScheduled)]
        if done:
            ms = (time.perf_counter() - t0) * 1000
            if placed is not None:
                placed += done
            return ms
        assert decisions, "the destroy freed nothing"


def main(args: argparse.Namespace) -> dict[str, object]:
    kind = SchedulerActor
    t0 = time.perf_counter()
    queue = QueueOrder(args.queue)
    small, _ = build(args.agents, args.small, kind, queue)
    small_round = quiet_ms(small.scheduler.decide, small, args.rounds)
    del small
    big, running = build(args.agents, args.pending, kind, queue)
    built_s = time.perf_counter() - t0
    # As the scheduler's process does: the state it rebuilt kept out of the collector's
    # sight (``services.actors.common``), full collections rare (``tune_gc``).
    gc.freeze()
    tune_gc()
    big_round = quiet_ms(big.scheduler.decide, big, args.rounds)
    limits = quiet_ms(big.scheduler._over_time, big, args.rounds)
    profile = None
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
    latencies = [
        destroy_to_running(big, running[k * 37 % len(running)]) for k in range(args.destroys)
    ]
    if args.profile:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
        profile = text.getvalue()
    result: dict[str, object] = {
        "bench": "queue_scale",
        "agents": args.agents,
        "pending": args.pending,
        "queue": queue.value,
        "round_ms_pending_small": round(small_round, 2),
        "small": args.small,
        "round_ms_pending_big": round(big_round, 2),
        "round_ratio": round(big_round / small_round, 2),
        "running": len(running),
        "limits_check_ms": round(limits, 3),
        "destroy_to_running": {**quantiles_ms(latencies), "n": len(latencies)},
        "still_pending": len(big.s.queue),
        "build_s": round(built_s, 1),
    }
    if profile is not None:
        print(profile)
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--pending", type=int, default=100_000)
    p.add_argument("--small", type=int, default=1_000)
    p.add_argument("--destroys", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--queue", choices=[q.value for q in QueueOrder], default="fifo")
    p.add_argument("--profile", action="store_true")
    print(json.dumps(main(p.parse_args())))
