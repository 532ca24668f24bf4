"""Why a PENDING session waits: the note names the resource that is short and where, as
a scheduling round tells it (``session.queued``) and a pending timeout's cancellation
repeats it (folded states, no bus)."""

from datetime import datetime, timedelta

from events import AnyEvent, GroupSettings, SessionCancelled, SessionScheduled
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.virtual_clock import VirtualClock
from services.domain.scheduling.waiting import WaitingNotes
from tests.support.doubles import NoLog
from tests.support.folded_cluster import GIB, T0, Cluster

CPU = 1000  # millicores in one CPU
FGPU = 100  # quanta in one fGPU


class World(Cluster):
    """The cluster, with a round to run and its sessions' amounts given in full."""

    def want(
        self,
        *,
        cpu: int = CPU,
        mem: int = GIB,
        fgpu: int = 0,
        group: str | None = None,
        gpu_models: tuple[str, ...] = (),
        storage_hosts: tuple[str, ...] = (),
        at: datetime = T0,
    ) -> str:
        """A session of user ``u`` PENDING; its id."""
        return self.ask(
            "u",
            fgpu,
            cpu=cpu,
            mem=mem,
            group=group,
            gpu_models=gpu_models,
            storage_hosts=storage_hosts,
            at=at,
        )

    def round(self, at: datetime = T0, **kwargs: object) -> list[AnyEvent]:
        """One scheduling round, its decisions folded back."""
        scheduler = SchedulerActor(NoLog(), VirtualClock(at), **kwargs)  # type: ignore[arg-type]
        decisions = scheduler.decide(self.s)
        for d in decisions:
            self.add(subj.LEDGER, d)
        return decisions

    def waiting(self, sid: str) -> str:
        v = self.s.sessions[sid]
        assert v.status.value == "PENDING", v.status
        assert v.waiting is not None
        return v.waiting


def test_cpu_short_with_fgpu_free_names_cpu_not_the_free_share() -> None:
    # The case: a 0.5-fGPU session waits only for CPU, on an agent whose CPUs are
    # all taken while its one device (split into 4 fGPU) is free.
    w = World()
    w.agent("a1", cpu=2 * CPU, per=4 * FGPU)
    w.hold("a1", cpu=2 * CPU, shares={})
    sid = w.want(cpu=CPU, fgpu=FGPU // 2)
    w.round()
    assert w.waiting(sid) == (
        "waiting for CPU: no agent of resource group default has 1 CPU free "
        "(none free on any agent)"
    )


def test_cpu_short_names_the_agent_with_the_most_free() -> None:
    w = World()
    w.agent("a1", cpu=2 * CPU)
    w.agent("a2", cpu=2 * CPU)
    w.hold("a1", cpu=2 * CPU, shares={})
    w.hold("a2", cpu=1500, shares={})
    sid = w.want(cpu=2 * CPU, fgpu=FGPU // 2)
    w.round()
    assert w.waiting(sid) == (
        "waiting for CPU: no agent of resource group default has 2 CPU free "
        "(most free: 0.5 CPU on a2)"
    )


def test_memory_short() -> None:
    w = World()
    w.agent("a1", mem=16 * GIB)
    w.agent("a2", mem=16 * GIB)
    w.hold("a1", mem=12 * GIB, shares={})
    w.hold("a2", mem=14 * GIB, shares={})
    sid = w.want(mem=8 * GIB, fgpu=FGPU // 4)
    w.round()
    assert w.waiting(sid) == (
        "waiting for memory: no agent of resource group default has 8G memory free "
        "(most free: 4G on a1)"
    )


def test_fgpu_short_names_the_largest_free_share_and_its_device() -> None:
    w = World()
    w.agent("a1", gpus=2)
    w.agent("a2", gpus=1)
    w.hold("a1", shares={0: 75, 1: 100})
    w.hold("a2", shares={0: 90})
    sid = w.want(fgpu=FGPU // 2)
    w.round()
    assert w.waiting(sid) == (
        "waiting for fGPU: no device in resource group default has 0.5 fGPU free "
        "(largest free share: 0.25 fGPU on a1 gpu0)"
    )


def test_fgpu_short_of_the_named_models_only() -> None:
    w = World()
    w.agent("old", model="T4")  # free, but of another model
    w.agent("new", model="A100")
    w.hold("new", shares={0: 80})
    sid = w.want(fgpu=FGPU // 2, gpu_models=("A100",))
    w.round()
    assert w.waiting(sid) == (
        "waiting for fGPU: no device of model A100 in resource group default has 0.5 fGPU "
        "free (largest free share: 0.2 fGPU on new gpu0)"
    )


def test_more_than_one_device_s_worth_counts_whole_free_devices() -> None:
    w = World()
    w.agent("a1", gpus=4)
    w.hold("a1", shares={0: 100, 1: 100, 2: 70})
    sid = w.want(fgpu=2 * FGPU + FGPU // 2)
    w.round()
    assert w.waiting(sid) == (
        "waiting for fGPU: no agent of resource group default has 2 whole devices and a "
        "0.5 fGPU share free (most: 1 whole device and a 0.3 fGPU share on a1)"
    )


def test_several_resources_short_everywhere_are_each_named() -> None:
    w = World()
    w.agent("a1", cpu=4 * CPU)
    w.agent("a2", cpu=4 * CPU)
    w.hold("a1", cpu=3 * CPU, shares={0: 100})
    w.hold("a2", cpu=4 * CPU, shares={0: 60})
    sid = w.want(cpu=2 * CPU, fgpu=FGPU // 2)
    w.round()
    assert w.waiting(sid) == (
        "waiting for CPU and fGPU: no agent of resource group default has 2 CPU free "
        "(most free: 1 CPU on a1); no device in resource group default has 0.5 fGPU "
        "free (largest free share: 0.4 fGPU on a2 gpu0)"
    )


def test_agents_short_of_different_things_name_the_one_closest_to_fitting() -> None:
    # a1 lacks CPU and memory, a2 lacks only fGPU, a3 lacks CPU and fGPU: no one resource
    # blocks on every agent, and a2 is the closest to fitting.
    w = World()
    w.agent("a1", cpu=2 * CPU, mem=4 * GIB)
    w.agent("a2", cpu=2 * CPU)
    w.agent("a3", cpu=2 * CPU)
    w.hold("a1", cpu=2 * CPU, mem=4 * GIB, shares={})
    w.hold("a2", shares={0: 80})
    w.hold("a3", cpu=2 * CPU, shares={0: 100})
    sid = w.want(cpu=CPU, mem=2 * GIB, fgpu=FGPU // 2)
    w.round()
    assert w.waiting(sid) == (
        "waiting for CPU or memory or fGPU: no agent of resource group default has 1 CPU, "
        "2G memory and 0.5 fGPU free at once (closest: a2, short of fGPU: largest free "
        "share 0.2 fGPU on gpu0 of 0.5)"
    )


def test_no_live_agent_in_the_group() -> None:
    w = World()
    w.agent("a1")
    w.lose("a1")
    sid = w.want(fgpu=FGPU // 2)
    w.round()
    assert w.waiting(sid) == "waiting for an agent: no agent of resource group default is alive"


def test_a_group_with_no_agent_yet() -> None:
    w = World()
    w.agent("elsewhere")  # of the default group: not a candidate
    w.group("empty", GroupSettings())
    sid = w.want(fgpu=FGPU // 2, group="empty")
    w.round()
    assert w.waiting(sid) == "waiting for an agent: no agent of resource group empty is alive"


def test_no_live_agent_mounting_the_folders() -> None:
    w = World()
    w.agent("mounting", storage_hosts=("nfs",))
    w.agent("other", storage_hosts=("local",))
    w.lose("mounting")
    sid = w.want(fgpu=FGPU // 2, storage_hosts=("nfs",))
    w.round()
    assert w.waiting(sid) == (
        "waiting for an agent: no live agent of resource group default mounts the virtual "
        "folders of storage host nfs"
    )


def test_agents_not_mounting_the_folders_are_not_counted() -> None:
    w = World()
    w.agent("mounting", cpu=2 * CPU, storage_hosts=("nfs",))
    w.agent("other", cpu=8 * CPU, storage_hosts=("local",))
    w.hold("mounting", cpu=2 * CPU, shares={})
    w.hold("other", shares={0: 100})
    sid = w.want(fgpu=FGPU // 2, storage_hosts=("nfs",))
    w.round()
    assert w.waiting(sid) == (
        "waiting for CPU: no agent of resource group default has 1 CPU free "
        "(none free on any agent)"
    )


def test_only_the_group_s_agents_count() -> None:
    w = World()
    w.agent("fast1", group="fast")
    w.agent("slow1", group="slow")  # free, but of another group
    w.group("fast", GroupSettings())
    w.group("slow", GroupSettings())
    w.hold("fast1", shares={0: 100})
    sid = w.want(fgpu=FGPU, group="fast")
    w.round()
    assert w.waiting(sid) == (
        "waiting for fGPU: no device in resource group fast has 1 fGPU free "
        "(none free on any device)"
    )


def test_a_session_that_fits_waits_behind_the_one_that_reserves() -> None:
    w = World()
    w.agent("a1")
    w.hold("a1", shares={0: 60})  # 0.4 free
    old = w.want(fgpu=FGPU)
    later = T0 + timedelta(seconds=600)
    small = w.want(fgpu=FGPU // 4, at=later)
    decisions = w.round(later, reserve_after_s=300)
    assert not [d for d in decisions if isinstance(d, SessionScheduled)]
    assert w.waiting(small) == (
        f"waiting behind session {old}: it waited longest, and nothing else of resource "
        "group default is placed until it fits"
    )
    assert w.waiting(old).startswith("waiting for fGPU: no device")


def test_a_pending_timeout_cancels_with_the_short_resource() -> None:
    w = World()
    w.agent("a1", cpu=2 * CPU)
    w.group("q", GroupSettings(pending_timeout_s=60))
    w.agent("q1", cpu=2 * CPU, group="q")
    w.hold("q1", cpu=2 * CPU, shares={})
    sid = w.want(fgpu=FGPU // 2, group="q")
    w.round()
    assert w.waiting(sid).startswith("waiting for CPU")
    decisions = w.round(T0 + timedelta(seconds=61))
    (cancelled,) = [d for d in decisions if isinstance(d, SessionCancelled)]
    assert cancelled.reason == (
        "nothing fits within the pending timeout of 60 s (waiting for CPU: no agent of "
        "resource group q has 1 CPU free (none free on any agent))"
    )


def test_notes_are_worked_out_once_per_shape_and_name_the_first_of_equals() -> None:
    # Alike agents are filed together, in order of registration: of a0..a4 (a3 unlike the
    # rest, a1 and a4 alike with 1 CPU free), the first registered of the most free.
    w = World()
    for i in range(5):
        w.agent(f"a{i}", cpu=4 * CPU)
        w.hold(f"a{i}", cpu=3 * CPU if i in (1, 4) else 4 * CPU, shares={})
    w.hold("a3", shares={0: 10})
    first, second = w.want(cpu=2 * CPU), w.want(cpu=2 * CPU)
    notes = WaitingNotes(w.s, "default", frozenset(), lambda hosts: frozenset())
    said = notes.note(w.s.sessions[first])
    assert said == (
        "waiting for CPU: no agent of resource group default has 2 CPU free "
        "(most free: 1 CPU on a1)"
    )
    assert notes.note(w.s.sessions[second]) is said  # the shape's, not worked out again
    assert not notes.fits(w.s.sessions[first])
