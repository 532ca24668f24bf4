"""Images in several versions: allow-lists and aliases per domain, who may set them,
placement on an agent that can pull, the PULLING status as the fold keeps it, the images
an agent reports. Pulling itself is in ``test_images_pull.py``."""

from typing import Any

import pytest

from events import (
    AgentImagesReported,
    AgentRegistered,
    CreateDomain,
    ImageInfo,
    SessionPreparing,
    SessionPulling,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminating,
    SetImageAlias,
    SetImages,
    Slots,
)
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.domain.fold.state_codec import decode_state, encode_state
from services.domain.scheduling.allocator import never_fits, place
from services.domain.scheduling.images import allowed_by, image_refusal, resolve_image
from services.domain.status import HOLDS_ALLOCATION, SessionStatus
from services.domain.tenancy.admin import apply, refusal
from services.domain.tenancy.model import Tenancy
from tests.support.cluster import GIB
from tests.support.fold_log import IMAGE, T0, Log
from tests.support.images import REGISTRY, TOOL_2
from tests.support.two_domains import two_domains

S = SessionStatus


# ---- allow-lists and aliases ------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "image", "allowed"),
    [
        (("fgpu/tool",), "fgpu/tool:1", True),  # a name allows every tag
        (("fgpu/tool",), "fgpu/tool", True),
        (("fgpu/tool:1",), "fgpu/tool:1", True),
        (("fgpu/tool:1",), "fgpu/tool:2", False),
        (("fgpu/tool:latest",), "fgpu/tool", True),  # no tag is latest, as on Docker
        (("fgpu/tool",), "fgpu/toolbox:1", False),  # a name, not a prefix
        (("fgpu/tool",), f"{REGISTRY}/fgpu/tool:1", False),  # another registry's
        ((f"{REGISTRY}/fgpu/tool",), TOOL_2, True),
        ((), "fgpu/tool:1", False),  # an empty list allows nothing
    ],
)
def test_an_allow_list_names_images_or_their_tags(
    entries: tuple[str, ...], image: str, allowed: bool
) -> None:
    assert allowed_by(entries, image) is allowed


def test_a_domain_without_an_allow_list_allows_everything_and_aliases_resolve() -> None:
    t = Tenancy(domains={"lab": {}, "other": {}})
    assert image_refusal(t, "lab", "anything/at-all:9") is None
    apply(t, SetImages(domain="lab", images=("fgpu/python",)))
    apply(t, SetImageAlias(domain="lab", alias="python", image="fgpu/python:3.11"))
    assert resolve_image(t, "lab", "python") == "fgpu/python:3.11"
    assert resolve_image(t, "other", "python") == "python"  # aliases are per domain
    assert image_refusal(t, "lab", "fgpu/python:3.11") is None
    assert image_refusal(t, "lab", "fgpu/busybox:latest") == (
        "image fgpu/busybox:latest is not allowed in domain lab (allowed: fgpu/python)"
    )
    assert image_refusal(t, "other", "fgpu/busybox:latest") is None
    apply(t, SetImages(domain="lab", images=None))  # dropped: everything again
    assert image_refusal(t, "lab", "fgpu/busybox:latest") is None
    apply(t, SetImageAlias(domain="lab", alias="python"))
    assert resolve_image(t, "lab", "python") == "python" and "lab" not in t.aliases


@pytest.mark.parametrize(
    "command",
    [
        SetImages(domain="lab", images=("fgpu/python",)),
        SetImages(domain="lab"),
        SetImageAlias(domain="lab", alias="python", image="fgpu/python:3.11"),
    ],
    ids=["allow", "allow-all", "alias"],
)
def test_only_a_superadmin_or_the_domains_admin_sets_its_images(command: Any) -> None:
    t = two_domains()
    assert refusal(t, "AKroot", command) is None
    assert refusal(t, "AKada", command) is None
    user = refusal(t, "AKuma", command)
    assert user is not None and user.code == "forbidden"
    other = refusal(t, "AKoto", command)
    assert other is not None and other.code == "forbidden"
    assert "domain-admin oto may not" in other.reason
    stranger = refusal(t, "AKnobody", command)
    assert stranger is not None and stranger.code == "forbidden"


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (SetImages(domain="nowhere", images=("a",)), "no domain nowhere"),
        (SetImages(domain="lab", images=("Bad Name",)), "holds white space"),
        (SetImageAlias(domain="lab", alias="py", image="py"), "would name itself"),
        (SetImageAlias(domain="lab", alias="py"), "no alias py in domain lab"),
        (SetImageAlias(domain="lab", alias="UPPER", image="a"), "is not a reference"),
    ],
)
def test_a_bad_image_command_is_refused_with_its_reason(command: Any, reason: str) -> None:
    why = refusal(two_domains(), "AKroot", command)
    assert why is not None and why.code == "invalid" and reason in why.reason


# ---- placement --------------------------------------------------------------------------


def _agent(
    log: Log, agent_id: str, images: tuple[str, ...], registry: str | None, cpu: int = 8000
) -> None:
    e = AgentRegistered(
        id=log.id("reg"),
        at=T0,
        actor=f"agent:{agent_id}",
        agent_id=agent_id,
        capacity=Slots(cpu=cpu, mem=32 * GIB, fgpu=100),
        gpus=(),
        fgpu_per_gpu=100,
        images=images,
        registry=registry,
    )
    log.add(subj.agent(agent_id), e)


def test_only_an_agent_pulling_from_the_images_registry_may_take_what_it_lacks() -> None:
    log = Log()
    _agent(log, "plain", (IMAGE,), None)
    _agent(log, "puller", (IMAGE,), REGISTRY)
    cpu = Slots(cpu=1000, mem=GIB)
    assert place(log.state, cpu, TOOL_2) == ("puller", ())
    assert never_fits(log.state, cpu, TOOL_2) is None
    # An image of another registry (or of none: Docker Hub) is never pulled.
    elsewhere = never_fits(log.state, cpu, "other.test:5000/fgpu/tool:2")
    assert elsewhere is not None and elsewhere.code == "unknown-image"
    assert place(log.state, cpu, "fgpu/tool:2") is None


def _admitted_cpu_session(log: Log, sid: str, image: str, cpu: int) -> None:
    e = SessionRequested(
        id=f"req-{sid}",
        at=T0,
        actor="alice",
        session_id=sid,
        owner="alice",
        image=image,
        slots=Slots(cpu=cpu, mem=GIB),
        cpu_only=True,
    )
    log.add(subj.request("alice", sid), e)
    log.admit(sid)


def test_the_scheduler_pulls_only_where_no_agent_holding_the_image_fits() -> None:
    log = Log()
    # Best fit alone would take the puller: it has the least CPU free.
    _agent(log, "puller", (IMAGE,), REGISTRY, cpu=2000)
    _agent(log, "holder", (IMAGE, TOOL_2), None, cpu=8000)
    scheduler = SchedulerActor(MemoryLog(), SystemClock())
    _admitted_cpu_session(log, "s1", TOOL_2, 1000)
    _admitted_cpu_session(log, "s2", IMAGE, 1000)
    placed = {e.session_id: e.agent_id for e in scheduler.decide(log.state) if _placed(e)}
    assert placed == {"s1": "holder", "s2": "puller"}
    # The holder full, the next goes where it must be pulled.
    _admitted_cpu_session(log, "s3", TOOL_2, 7000)
    _admitted_cpu_session(log, "s4", TOOL_2, 1000)
    placed = {e.session_id: e.agent_id for e in scheduler.decide(log.state) if _placed(e)}
    assert placed == {"s3": "holder", "s4": "puller"}


def _placed(e: object) -> bool:
    return isinstance(e, SessionScheduled)


# ---- the fold ---------------------------------------------------------------------------


def _scheduled(log: Log) -> None:
    log.agent()
    log.request()
    log.admit()
    log.schedule()


def test_pulling_sits_between_preparing_and_running_and_keeps_its_progress() -> None:
    log = Log()
    _scheduled(log)
    log.report(SessionPreparing)
    log.report(SessionPulling, image=IMAGE, current=0, total=0)
    log.report(SessionPulling, image=IMAGE, current=5, total=10)
    v = log.state.sessions["s1"]
    assert v.status is S.PULLING and (v.pulled, v.pull_total) == (5, 10)
    assert S.PULLING in HOLDS_ALLOCATION and log.state.agents["a1"].sessions == {"s1": None}
    # One transition for the status, however many reports of progress.
    assert [t.status for t in v.history].count(S.PULLING) == 1
    log.report(SessionRunning, container_id="c1")
    assert v.status is S.RUNNING
    assert [t.status for t in v.history][-3:] == [S.PREPARING, S.PULLING, S.RUNNING]


def test_a_pulling_session_may_be_stopped_and_a_late_pull_report_changes_nothing() -> None:
    log = Log()
    _scheduled(log)
    log.report(SessionPulling, image=IMAGE, current=1, total=10)
    log.add(
        subj.LEDGER,
        SessionTerminating(
            id="stop", at=T0, actor="scheduler", session_id="s1", agent_id="a1", reason="asked"
        ),
    )
    log.report(SessionPulling, image=IMAGE, current=9, total=10)
    v = log.state.sessions["s1"]
    assert v.status is S.TERMINATING and v.pulled == 1


def test_an_alias_resolved_at_admission_is_the_image_the_session_runs() -> None:
    log = Log()
    log.agent()
    log.request()
    from events import SessionAdmitted

    e = SessionAdmitted(
        id="adm", at=T0, actor="quota", session_id="s1", owner="alice", image="fgpu/other:2"
    )
    log.add(subj.ADMISSION, e)
    assert log.state.sessions["s1"].image == "fgpu/other:2"


def test_reported_images_replace_the_registrations_and_survive_a_snapshot() -> None:
    log = Log()
    log.agent()
    pulled = ImageInfo(ref=TOOL_2, id="sha256:" + "a" * 64, digest="sha256:" + "b" * 64, size=7)
    e = AgentImagesReported(id="img", at=T0, actor="agent:a1", agent_id="a1", images=(pulled,))
    log.add(subj.agent("a1"), e)
    a = log.state.agents["a1"]
    assert a.images == frozenset({TOOL_2}) and a.image_details == (pulled,)
    _scheduled_on_a1(log)
    log.report(SessionPulling, image=TOOL_2, current=3, total=7)
    apply(log.state.tenancy, CreateDomain(domain="lab"))
    apply(log.state.tenancy, SetImages(domain="lab", images=("fgpu/tool",)))
    apply(log.state.tenancy, SetImageAlias(domain="lab", alias="tool", image=TOOL_2))
    back = decode_state(encode_state(log.state))
    assert back.agents["a1"].image_details == (pulled,)
    assert (back.sessions["s1"].pulled, back.sessions["s1"].pull_total) == (3, 7)
    assert back.tenancy.images == {"lab": ("fgpu/tool",)}
    assert back.tenancy.aliases == {"lab": {"tool": TOOL_2}}


def _scheduled_on_a1(log: Log) -> None:
    log.request()
    log.admit()
    log.schedule()


def test_a_sessions_story_tells_its_alias_and_its_pull() -> None:
    from events import SessionAdmitted
    from projections.story import story

    def pulling(current: int, total: int) -> SessionPulling:
        return SessionPulling(
            id=f"p{current}",
            at=T0,
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            image=TOOL_2,
            current=current,
            total=total,
        )

    admitted = SessionAdmitted(
        id="adm", at=T0, actor="quota", session_id="s1", owner="alice", image=TOOL_2
    )
    lines = story([(1, admitted), (2, pulling(0, 0)), (3, pulling(5 << 20, 10 << 20))], {"adm"})
    assert [line.text for line in lines] == [
        f"quota admitted it to run {TOOL_2}: it waits for a place (PENDING)",
        f"a1 pulls {TOOL_2} from its registry",
        f"a1 pulled 5M of 10M of {TOOL_2}",
    ]


def test_a_pull_report_or_an_image_report_on_anothers_subject_changes_nothing() -> None:
    """Only the session's agent reports its pull, and only an agent its own images: the
    same event on a user's subject, or on another agent's, is refused by the fold."""
    log = Log()
    _scheduled(log)
    pull = SessionPulling(
        id="p", at=T0, actor="mallory", session_id="s1", agent_id="a1", image=IMAGE
    )
    forged = ImageInfo(ref=TOOL_2, id="sha256:" + "f" * 64)
    images = AgentImagesReported(id="i", at=T0, actor="agent:a2", agent_id="a1", images=(forged,))
    log.add(subj.request("mallory", "s1"), pull)
    log.add(subj.agent("a2"), images)
    assert log.state.sessions["s1"].status is S.SCHEDULED
    assert TOOL_2 not in log.state.agents["a1"].images
    assert len(log.state.malformed) == 2


def test_a_pulling_session_shows_how_far_its_pull_got() -> None:
    from services.api.shapes import session_from_view
    from services.cli.render import session_lines

    log = Log()
    _scheduled(log)
    log.report(SessionPreparing)
    log.report(SessionPulling, image=IMAGE, current=0, total=0)
    log.report(SessionPulling, image=IMAGE, current=3 << 20, total=10 << 20)
    shown = session_from_view(log.state.sessions["s1"]).model_dump(mode="json")
    assert shown["pull"] == {"current": 3 << 20, "total": 10 << 20}
    assert shown["times"]["pulling"] is not None
    assert session_lines(shown)[0] == "[bold]s1[/]  PULLING  (pulling 3M/10M (30%))"
