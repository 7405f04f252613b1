"""What a rate limit promises, in numbers (docs/webhooks.md, "Rate limit"; docs/delivery.md,
"Rate limits"), and how late a grant may be sent and still keep the promise. Pure arithmetic.

The promise: after the first second, no 1-second window holds more than ceil(1.1 x R)
requests started at the receiver. The token bucket (the claim in queries/queue.sql) grants at
most 1 + (CATCH_UP + L) x R requests in any L seconds (its capacity, 1 + CATCH_UP x R, then R a
second). A request starts at the receiver some time after its grant; if those delays differ by
at most x, the requests started in a 1-second window were granted within 1 + x seconds:
at most 1 + (1 + CATCH_UP + x) x R of them, which stays within the promise while
x < (ceil(1.1 R) - (1 + CATCH_UP) R) / R. That leaves at least 0.07 s for any R (far more for
a small one: 0.97 s for R = 1), shared between the engine's own delays (`grant_grace`) and the
way to the receiver (NETWORK_SECONDS).
"""

from __future__ import annotations

# How late a claim may come for an endpoint's next request and still start it, in seconds:
# the bucket's catch-up (`0.03` in queries/queue.sql's claim).
CATCH_UP_SECONDS = 0.03
# Kept for the time from the engine writing a request to the receiver seeing it start.
NETWORK_SECONDS = 0.03


def window_bound(rate_limit: int) -> int:
    """ceil(1.1 x rate_limit): the most requests any 1-second window holds, after the first."""
    return -(-11 * rate_limit // 10)


def grant_grace(rate_limit: int) -> float:
    """How long after its grant (as the engine can tell it) a request of an endpoint limited to
    `rate_limit` a second may still be sent: later, it could crowd a window past
    `window_bound`, and the engine hands the grant back unsent. 0.04 s at least (R a
    multiple of 10), up to 0.94 s (R = 1)."""
    spare = window_bound(rate_limit) - (1 + CATCH_UP_SECONDS) * rate_limit
    return max(spare / rate_limit - NETWORK_SECONDS, 0.0)
