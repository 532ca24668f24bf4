"""Quota decisions: does a request fit its owner's policy, given what the owner holds?"""

from events import PolicySet, Slots
from services.domain.resources import add, fits, format_slots
from services.domain.state import OwnerUsage

__all__ = ["over_policy"]


def over_policy(policy: PolicySet | None, usage: OwnerUsage | None, need: Slots) -> str | None:
    """Why admitting ``need`` would break ``policy``, or None if it fits.

    Admission holds the request's slots against the policy until the session ends, whether
    it is still PENDING or RUNNING, so concurrent sessions never exceed the policy.
    """
    if policy is None:
        return None
    held = usage or OwnerUsage()
    limit = policy.max_concurrent_sessions
    if limit is not None and held.sessions + 1 > limit:
        return f"policy allows {limit} concurrent sessions; {held.sessions} already held"
    cap = policy.max_slots
    if cap is not None and not fits(add(held.slots, need), cap):
        return f"policy allows {format_slots(cap)} in total; held: {format_slots(held.slots)}"
    return None
