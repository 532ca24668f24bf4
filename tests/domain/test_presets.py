"""Resource presets and a resource group's fGPU quantum as the tenancy holds them: the
fold, who may define presets (a domain's admins for their domain, superadmins for any and
for every domain; never a user), the reasons a bad one is refused, a snapshot keeping
them, and the quantum refusing a finer amount at admission."""

from typing import Any

import pytest

from events import (
    CreateDomain,
    CreateGroup,
    CreatePreset,
    GroupSettings,
    RemovePreset,
    Slots,
    UpdateGroup,
)
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state_codec import decode_state, encode_state
from services.domain.tenancy.admin import apply, refusal
from services.domain.tenancy.groups import admission_problem, fgpu_quantum_of
from services.domain.tenancy.model import presets_for
from tests.support.two_domains import two_domains

SMALL = Slots(cpu=2000, mem=4 << 30, fgpu=50)


def test_presets_fold_by_domain_and_name_and_each_domain_sees_its_own_and_everyones() -> None:
    t = two_domains()
    apply(t, CreatePreset(name="half", slots=SMALL))
    apply(t, CreatePreset(name="half", slots=SMALL, domain="lab", group="default"))
    apply(t, CreatePreset(name="big", slots=Slots(cpu=8000, mem=1 << 34, fgpu=200), domain="lab"))
    apply(t, CreatePreset(name="theirs", slots=SMALL, domain="other"))
    assert [(p.domain, p.name) for p in presets_for(t, "lab")] == [
        (None, "half"),
        ("lab", "big"),
        ("lab", "half"),
    ]
    assert [(p.domain, p.name) for p in presets_for(t, "other")] == [
        (None, "half"),
        ("other", "theirs"),
    ]
    apply(t, CreatePreset(name="big", slots=SMALL, domain="lab"))  # exists: kept as it was
    assert t.presets["lab", "big"].slots.fgpu == 200
    apply(t, RemovePreset(name="half"))
    assert [(p.domain, p.name) for p in presets_for(t, "other")] == [("other", "theirs")]


@pytest.mark.parametrize(
    "command",
    [CreatePreset(name="p", slots=SMALL, domain="lab"), RemovePreset(name="p", domain="lab")],
    ids=["create", "remove"],
)
def test_a_domains_presets_are_its_admins_and_superadmins_never_a_users(command: Any) -> None:
    t = two_domains()
    if isinstance(command, RemovePreset):
        apply(t, CreatePreset(name="p", slots=SMALL, domain="lab"))
    assert refusal(t, "AKroot", command) is None
    assert refusal(t, "AKada", command) is None
    user = refusal(t, "AKuma", command)
    assert user is not None and user.code == "forbidden"
    assert user.reason.startswith("user uma may not ")
    other = refusal(t, "AKoto", command)
    assert other is not None and other.code == "forbidden"
    assert "domain-admin oto may not" in other.reason
    stranger = refusal(t, "AKnobody", command)
    assert stranger is not None and stranger.code == "forbidden"


def test_presets_of_every_domain_are_a_superadmins() -> None:
    t = two_domains()
    everyone = CreatePreset(name="p", slots=SMALL)
    assert refusal(t, "AKroot", everyone) is None
    admin = refusal(t, "AKada", everyone)
    assert admin is not None and admin.code == "forbidden"
    assert admin.reason == "domain-admin ada may not create preset"


@pytest.mark.parametrize(
    ("command", "code", "reason"),
    [
        (CreatePreset(name="p", slots=SMALL, domain="nowhere"), "invalid", "no domain nowhere"),
        (CreatePreset(name="a b", slots=SMALL), "invalid", "must be 1-64 letters"),
        (CreatePreset(name="p", slots=SMALL, group="gone"), "invalid", "no resource group gone"),
        (CreatePreset(name="p", slots=Slots(cpu=0, mem=1, fgpu=0)), "invalid", "some CPU"),
        (CreatePreset(name="p", slots=Slots(cpu=1, mem=1, fgpu=-1)), "invalid", "no negative"),
        (CreatePreset(name="taken", slots=SMALL, domain="lab"), "conflict", "exists"),
        (RemovePreset(name="p", domain="lab"), "invalid", "no preset p of domain lab"),
        (RemovePreset(name="taken"), "invalid", "no preset taken of every domain"),
    ],
)
def test_a_bad_preset_is_refused_with_its_reason(command: Any, code: str, reason: str) -> None:
    t = two_domains()
    apply(t, CreatePreset(name="taken", slots=SMALL, domain="lab"))
    why = refusal(t, "AKroot", command)
    assert why is not None and (why.code, reason in why.reason) == (code, True), why


def test_a_snapshot_keeps_the_presets() -> None:
    s = ClusterState()
    apply(s.tenancy, CreateDomain(domain="lab"))
    apply(s.tenancy, CreatePreset(name="half", slots=SMALL, domain="lab", group="default"))
    apply(s.tenancy, CreatePreset(name="one", slots=SMALL))
    again = decode_state(encode_state(s))
    assert again.tenancy.presets == s.tenancy.presets


def test_a_groups_quantum_refuses_a_finer_fgpu_at_admission() -> None:
    t = two_domains()
    coarse = GroupSettings(fgpu_quantum=10)
    assert refusal(t, "AKroot", CreateGroup(group="g", settings=coarse)) is None
    apply(t, CreateGroup(group="g", settings=coarse))
    assert fgpu_quantum_of(t.groups, "g") == 10
    assert fgpu_quantum_of(t.groups, "default") == 1  # the cluster's own: 0.01
    assert admission_problem(t.groups, "g", "lab/p", None, 50) is None
    assert admission_problem(t.groups, "g", "lab/p", None, 55) == (
        "resource group g gives fGPU in steps of 0.1; asked 0.55"
    )
    assert admission_problem(t.groups, "default", "lab/p", None, 55) is None
    for wrong in (0, 101):
        bad = UpdateGroup(group="g", settings=GroupSettings(fgpu_quantum=wrong))
        why = refusal(t, "AKroot", bad)
        assert why is not None and why.reason == "the fGPU quantum must be 0.01 to 1 fGPU"
    admin = refusal(t, "AKada", UpdateGroup(group="g", settings=GroupSettings(fgpu_quantum=5)))
    assert admin is not None and admin.code == "forbidden"


def test_a_domain_admins_group_change_is_forbidden_before_it_is_judged_stale() -> None:
    """A domain admin sees its domain's part of a group: an update built from that names a
    stale ``expected``, and would read "changed since it was read" (an invalid request, to
    try again) where the answer is that it may never change a group."""
    t = two_domains()
    apply(t, CreateGroup(group="g", settings=GroupSettings(fgpu_quantum=10)))
    seen = GroupSettings(fgpu_quantum=5)  # not what the group holds
    stale = UpdateGroup(group="g", settings=GroupSettings(fgpu_quantum=20), expected=seen)
    admin = refusal(t, "AKada", stale)
    assert admin is not None and admin.code == "forbidden", admin
    root = refusal(t, "AKroot", stale)  # a superadmin's stale update: stale, try again
    assert root is not None and root.code == "conflict" and "changed since" in root.reason
    for command in (CreateGroup(group="h", settings=seen), CreateDomain(domain="d2")):
        refused = refusal(t, "AKada", command)
        assert refused is not None and refused.code == "forbidden"
