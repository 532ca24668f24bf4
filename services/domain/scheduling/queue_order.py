"""Dominant shares, for DRF order (dominant resource fairness, Ghodsi et al., NSDI '11;
the round itself is ``schedule_round``'s).

A user's dominant share is the largest of its CPU, memory and fGPU held in the group (by
sessions placed on the group's agents) over the group's capacity of each. Shares are
exact fractions, so every scheduler of one log takes the same order. Each is a pure
function of the folded state; a user is its name (its access key on a cluster without
tenancy: ``pending.user_of``).
"""

from fractions import Fraction

from events import Slots
from services.domain.fold.cluster import ClusterState
from services.domain.fold.pending import user_of

__all__ = ["dominant_share", "group_capacity", "held_by_user", "user_of"]


def group_capacity(s: ClusterState, group: str) -> Slots:
    """The CPU, memory and fGPU of the group's agents (lost ones too: they may come back),
    as the fold keeps it (``group_shares``)."""
    return s.shares.capacity(group)


def held_by_user(s: ClusterState, group: str) -> dict[str, Slots]:
    """What each user's sessions hold on the group's agents (a copy: a round adds to it
    what it places)."""
    return dict(s.shares.held(group))


def dominant_share(held: Slots, capacity: Slots) -> Fraction:
    """The largest of ``held``'s CPU, memory and fGPU as a fraction of ``capacity``'s
    (a resource the group has none of counts for nothing)."""
    shares = [
        Fraction(h, c)
        for h, c in ((held.cpu, capacity.cpu), (held.mem, capacity.mem), (held.fgpu, capacity.fgpu))
        if c > 0
    ]
    return max(shares, default=Fraction(0))
