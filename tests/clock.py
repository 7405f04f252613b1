"""A clock for tests: production code takes any `Clock` (dispatcher/domain/clock.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock that moves only when told to (tests), or by `tick` seconds on every read."""

    def __init__(self, start: datetime | None = None, tick: float = 0.0) -> None:
        self._now = start or datetime.now(UTC)
        self._tick = timedelta(seconds=tick)

    def now(self) -> datetime:
        self._now += self._tick
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, moment: datetime) -> None:
        self._now = moment
