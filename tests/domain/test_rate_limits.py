"""The rate limit's arithmetic (dispatcher/domain/rate_limits.py): how late a grant may be sent
keeps every 1-second window within ceil(1.1 x R), for every R the API accepts."""

from __future__ import annotations

import math

import pytest

from dispatcher.domain.rate_limits import (
    CATCH_UP_SECONDS,
    NETWORK_SECONDS,
    grant_grace,
    window_bound,
)


@pytest.mark.parametrize(
    ("rate", "bound", "grace"),
    [(1, 2, 0.94), (2, 3, 0.44), (5, 6, 0.14), (10, 11, 0.04), (20, 22, 0.04), (1000, 1100, 0.04)],
)
def test_the_bound_and_the_grace_of_some_limits(rate: int, bound: int, grace: float) -> None:
    assert window_bound(rate) == bound
    assert grant_grace(rate) == pytest.approx(grace)


def test_grants_sent_within_the_grace_never_crowd_a_window() -> None:
    """A 1-second window at the receiver holds requests granted within 1 + grace + network
    seconds; the bucket grants at most 1 + (CATCH_UP + that) x R of them."""
    for rate in range(1, 10_001):
        stray = grant_grace(rate) + NETWORK_SECONDS
        granted = 1 + (1 + CATCH_UP_SECONDS + stray) * rate
        assert math.floor(granted - 1e-9) <= window_bound(rate), rate
        assert grant_grace(rate) >= 0.04 - 1e-9, rate
