"""Time as a dependency, so retry schedules and the disable rule are tested in milliseconds
(with tests/clock.py's FakeClock)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def isoformat(moment: datetime) -> str:
    """ISO 8601 in UTC with millisecond precision and a `Z`: `2026-11-21T04:36:12.123Z`."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def isoformat_or_none(moment: datetime | None) -> str | None:
    return None if moment is None else isoformat(moment)


# ISO 8601 date-time with a UTC offset, in ASCII: `2026-11-21T04:36:12Z`, `...12.5+02:00`.
_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
    r"(Z|z|[+-][0-9]{2}:[0-9]{2})"
)


def parse_instant(text: str) -> datetime | None:
    """An ISO 8601 date-time with its offset (`Z` or `±hh:mm`), or None when `text` is not
    one: a date alone or a time without an offset is ambiguous, so it is refused."""
    if not _INSTANT.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:  # well shaped, but no such moment (month 13, hour 25)
        return None
