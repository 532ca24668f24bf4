"""A folded state built event by event, as the log would give it: agents, groups, sessions
asked for and held, for the scheduler's tests (no bus)."""

from collections.abc import Sequence
from datetime import UTC, datetime

from events import (
    AdminApplied,
    AgentLost,
    AgentRegistered,
    AnyEvent,
    CreateGroup,
    DevicePlacement,
    GpuInfo,
    GroupSettings,
    Record,
    SessionAdmitted,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    Slots,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IMAGE = "fgpu/busybox:latest"
GIB = 1 << 30


class Cluster:
    """A folded state built event by event, as the log would give it."""

    def __init__(self) -> None:
        self.s = ClusterState()
        self.seq = 0
        self.n = 0

    def add(self, subject: str, e: AnyEvent) -> None:
        self.seq += 1
        evolve(self.s, Record(seq=self.seq, subject=subject, event=e))

    def agent(
        self,
        agent_id: str,
        group: str = "default",
        gpus: int = 1,
        cpu: int = 64_000,
        storage_hosts: tuple[str, ...] | None = None,
        *,
        mem: int = 256 * GIB,
        per: int = 100,
        model: str = "m",
    ) -> None:
        """An agent of ``gpus`` devices of ``model``, each worth ``per`` quanta."""
        devices = tuple(
            GpuInfo(index=i, uuid=f"{agent_id}-{i}", model=model, mem=16 * GIB, sm_count=80)
            for i in range(gpus)
        )
        e = AgentRegistered(
            id=f"r-{agent_id}",
            at=T0,
            actor=f"agent:{agent_id}",
            agent_id=agent_id,
            capacity=Slots(cpu=cpu, mem=mem, fgpu=per * gpus),
            gpus=devices,
            fgpu_per_gpu=per,
            images=(IMAGE,),
            group=group,
            storage_hosts=storage_hosts,
        )
        self.add(subj.agent(agent_id), e)

    def lose(self, agent_id: str) -> None:
        """The scheduler stopped hearing ``agent_id``."""
        e = AgentLost(
            id=f"lost-{agent_id}", at=T0, actor="scheduler", agent_id=agent_id, reason="silent"
        )
        self.add(subj.LEDGER, e)

    def group(self, name: str, settings: GroupSettings) -> None:
        c = CreateGroup(group=name, settings=settings)
        e = AdminApplied(id=f"g-{name}", at=T0, actor="registrar", requester="root", command=c)
        self.add(subj.TENANCY, e)

    def ask(
        self,
        owner: str,
        fgpu: int,
        *,
        group: str | None = None,
        at: datetime = T0,
        lifetime_s: int | None = None,
        cpu: int = 100,
        mem: int = GIB,
        command: tuple[str, ...] = (),
        priority: int = 0,
        storage_hosts: tuple[str, ...] = (),
        gpu_models: tuple[str, ...] = (),
    ) -> str:
        """A session requested and admitted (PENDING); its id."""
        self.n += 1
        sid = f"s{self.n}"
        e = SessionRequested(
            id=f"q-{sid}",
            at=at,
            actor=owner,
            session_id=sid,
            owner=owner,
            image=IMAGE,
            slots=Slots(cpu=cpu, mem=mem, fgpu=fgpu),
            group=group,
            lifetime_s=lifetime_s,
            command=command,
            priority=priority,
            gpu_models=gpu_models,
        )
        self.add(subj.request(owner, sid), e)
        admitted = SessionAdmitted(
            id=f"a-{sid}",
            at=at,
            actor="quota",
            session_id=sid,
            owner=owner,
            storage_hosts=storage_hosts,
        )
        self.add(subj.ADMISSION, admitted)
        return sid

    def hold(self, agent_id: str, *, cpu: int = 0, mem: int = 0, shares: dict[int, int]) -> str:
        """A session RUNNING on ``agent_id`` holding ``cpu``, ``mem`` and ``shares`` (device
        index -> quanta); its id."""
        fgpu = sum(shares.values())
        group = self.s.agents[agent_id].group
        sid = self.ask("u", fgpu, cpu=cpu, mem=mem, group=group)
        devices = tuple(DevicePlacement(gpu_index=i, fgpu=q) for i, q in shares.items())
        placed = SessionScheduled(
            id=f"p-{sid}",
            at=T0,
            actor="scheduler",
            session_id=sid,
            owner="u",
            agent_id=agent_id,
            slots=Slots(cpu=cpu, mem=mem, fgpu=fgpu),
            devices=devices,
        )
        self.run_placed([placed])
        return sid

    def run_placed(self, decisions: Sequence[AnyEvent], at: datetime = T0) -> None:
        """Fold the decisions back, and each placed session's agent starting it."""
        for d in decisions:
            self.add(subj.LEDGER, d)
            if isinstance(d, SessionScheduled):
                running = SessionRunning(
                    id=f"run-{d.session_id}",
                    at=at,
                    actor=f"agent:{d.agent_id}",
                    session_id=d.session_id,
                    agent_id=d.agent_id,
                    container_id=f"c-{d.session_id}",
                )
                self.add(subj.agent_session(d.agent_id, d.session_id), running)
