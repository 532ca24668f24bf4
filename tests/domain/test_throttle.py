"""Wrong secrets throttled per access key: a few failures, then refusals without a check
until the window moves on; a secret already known right is never locked out."""

from hypothesis import given
from hypothesis import strategies as st

from services.domain.access.throttle import FailureThrottle, SecretChecks


def test_after_the_limit_a_key_waits_until_its_oldest_failure_leaves_the_window() -> None:
    t = FailureThrottle(limit=3, window_s=60)
    for at in (0, 10, 20):
        assert t.wait_s("AK1", at) == 0
        t.failed("AK1", at)
    assert t.wait_s("AK1", 30) == 30  # the failure at 0 leaves at 60
    assert t.wait_s("AK2", 30) == 0  # another key is not concerned
    assert t.wait_s("AK1", 60) == 0


@given(st.lists(st.floats(0, 1000), max_size=60), st.integers(1, 6), st.floats(1, 120))
def test_never_more_than_the_limit_of_checks_fail_in_a_window(
    gaps: list[float], limit: int, window: float
) -> None:
    t = FailureThrottle(limit=limit, window_s=window)
    now, checked = 0.0, []
    for gap in gaps:
        now += gap
        if t.wait_s("k", now) == 0:
            t.failed("k", now)
            checked.append(now)
    for i, at in enumerate(checked):
        assert len([x for x in checked[i:] if x < at + window]) <= limit


def test_a_right_secret_known_before_is_accepted_while_the_key_is_throttled() -> None:
    c = SecretChecks(FailureThrottle(limit=2, window_s=60))
    assert c.before("AK", "right", 0) == ""  # unknown: to be checked
    c.after("AK", "right", True, 0)
    assert c.before("AK", "wrong", 1) is False  # known key, another secret: no check
    other = SecretChecks(FailureThrottle(limit=2, window_s=60))
    for at in (0, 1):
        assert other.before("AK", "guess", at) == ""
        other.after("AK", "guess", False, at)
    refused = other.before("AK", "right", 2)
    assert isinstance(refused, str) and refused.startswith("too many wrong secrets")
    c.forget("AK")
    assert c.before("AK", "right", 3) == ""
