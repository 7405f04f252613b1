"""When to try a delivery again, and when to give up."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """`schedule[i]` is the delay after attempt i+1; after the last, the delivery is given up.

    Each delay gets +/- `jitter` (a fraction) so that a burst of failures does not come back
    as a burst. A `Retry-After` from the receiver is honoured as a floor, capped at the
    schedule's largest delay.
    """

    schedule: tuple[float, ...]
    jitter: float = 0.2

    @property
    def max_attempts(self) -> int:
        return len(self.schedule) + 1

    def delay_after(
        self,
        attempts_made: int,
        retry_after: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float | None:
        """Seconds until the next attempt, or None when the delivery should be given up."""
        if attempts_made >= self.max_attempts or attempts_made < 1:
            return None
        base = self.schedule[attempts_made - 1]
        delay = base * (1.0 + self.jitter * (2.0 * rand() - 1.0))
        if retry_after is not None and retry_after > 0:
            delay = max(delay, min(retry_after, max(self.schedule)))
        return max(delay, 0.0)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """`Retry-After` as seconds from now: either delta-seconds or an HTTP date (a date past:
    0). None when it is neither (garbage, a negative or fractional number): not a valid
    Retry-After. A huge value is returned as it is; `RetryPolicy.delay_after` caps it."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max((moment - now).total_seconds(), 0.0)
