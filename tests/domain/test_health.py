"""Endpoint health's pure rules, as tables: the response-time histogram and its percentiles, the
tallies a batch of attempts adds, and which rollup rows a window reads."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from dispatcher.domain import health
from dispatcher.domain.enums import DeliveryStatus
from dispatcher.domain.health import (
    BUCKETS,
    LOWER_BOUNDS,
    Cutoffs,
    EndpointHealth,
    SettledDelivery,
    StatsWindow,
    WindowRows,
    add_histograms,
    bucket_of,
    bucket_value,
    percentile,
    rollup,
    rollup_cutoffs,
    window_rows,
)
from dispatcher.domain.outcomes import AttemptOutcome
from tests.records import attempt_result

T = datetime(2026, 3, 10, 14, 37, 21, 500_000, tzinfo=UTC)


def test_the_bucket_layout_is_fixed() -> None:
    # Stored with the data: a change here needs a migration of every rollup row.
    assert BUCKETS == 103
    assert LOWER_BOUNDS[:16] == (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 17)
    assert LOWER_BOUNDS[-1] == 64288
    assert list(LOWER_BOUNDS) == sorted(set(LOWER_BOUNDS))


@pytest.mark.parametrize(
    ("ms", "bucket"),
    [(-5, 0), (0, 0), (9, 9), (10, 10), (11, 11), (12, 11), (13, 12), (64287, 101), (10**9, 102)],
)
def test_bucket_of(ms: int, bucket: int) -> None:
    assert bucket_of(ms) == bucket


def test_a_bucket_stands_for_its_times_within_ten_percent() -> None:
    for ms in range(0, 10):
        assert bucket_value(bucket_of(ms)) == ms  # exact below 10 ms
    for ms in range(10, 60_000):
        value = bucket_value(bucket_of(ms))
        assert abs(value - ms) <= ms * 0.1, ms
        if ms >= 20:
            assert abs(value - ms) <= ms * 0.06, ms
    assert bucket_value(BUCKETS - 1) == LOWER_BOUNDS[-1]  # the open-ended last bucket


def histogram(times: list[int]) -> list[int]:
    counts = [0] * BUCKETS
    for ms in times:
        counts[bucket_of(ms)] += 1
    return counts


@pytest.mark.parametrize(
    ("times", "percent", "expected"),
    [
        ([], 50, None),
        ([7], 50, 7),
        ([7], 99, 7),
        ([1, 2, 3, 4], 50, 2),  # nearest rank: the 2nd of 4
        ([1, 2, 3, 4], 51, 3),
        (list(range(1, 101)), 95, bucket_value(bucket_of(95))),  # rank 95, not 96
        (list(range(1, 101)), 99, bucket_value(bucket_of(99))),
        ([5] * 99 + [30_000], 99, 5),
        ([5] * 99 + [30_000], 100, bucket_value(bucket_of(30_000))),
    ],
)
def test_percentile(times: list[int], percent: int, expected: int | None) -> None:
    assert percentile(histogram(times), percent) == expected


def test_histograms_add_bucket_by_bucket() -> None:
    assert add_histograms([]) == [0] * BUCKETS
    assert add_histograms([histogram([1, 500]), None, histogram([1])]) == histogram([1, 1, 500])


def test_a_batch_is_tallied_per_endpoint_minute_and_hour() -> None:
    early = T.replace(minute=59, second=59)
    late = early + timedelta(seconds=2)  # the next minute, and the next hour
    attempts = [
        attempt_result("WH2", T, AttemptOutcome.SUCCESS, 200, 12),
        attempt_result("WH1", early, AttemptOutcome.TIMEOUT, None, 15000),
        attempt_result("WH1", early, AttemptOutcome.HTTP_ERROR, 500, 40),
        attempt_result("WH1", late, AttemptOutcome.SUCCESS, 204, 3),
        attempt_result("WH1", early - timedelta(seconds=9), AttemptOutcome.SUCCESS, 200, 4),
    ]
    minutes, hours = rollup(attempts)
    assert [key for key, _ in minutes] == [
        ("WH1", early.replace(second=0, microsecond=0)),
        ("WH1", late.replace(second=0, microsecond=0)),
        ("WH2", T.replace(second=0, microsecond=0)),
    ]
    assert [key for key, _ in hours] == [
        ("WH1", early.replace(minute=0, second=0, microsecond=0)),
        ("WH1", late.replace(minute=0, second=0, microsecond=0)),
        ("WH2", T.replace(minute=0, second=0, microsecond=0)),
    ]
    busy = minutes[0][1]
    assert busy.outcomes == {
        AttemptOutcome.SUCCESS: 1,
        AttemptOutcome.HTTP_ERROR: 1,
        AttemptOutcome.TIMEOUT: 1,
        AttemptOutcome.CONNECTION_ERROR: 0,
        AttemptOutcome.BLOCKED: 0,
    }
    # Only answered attempts are timed (the timeout had no answer).
    assert busy.histogram == histogram([40, 4])
    assert busy.last_success_at == early - timedelta(seconds=9)
    assert busy.last_failure_at == early
    assert hours[0][1].outcomes == busy.outcomes
    assert minutes[1][1].last_failure_at is None


def test_settled_deliveries_count_in_the_minute_they_were_created() -> None:
    created = T - timedelta(hours=2)
    attempts = [attempt_result("WH1", T, AttemptOutcome.SUCCESS, 200, 3)]
    settled = [
        SettledDelivery("WH1", created, DeliveryStatus.DELIVERED),
        SettledDelivery("WH1", created, DeliveryStatus.FAILED),
        SettledDelivery("WH1", T, DeliveryStatus.DELIVERED),
    ]
    minutes, hours = rollup(attempts, settled)
    counts = {key[1]: (t.delivered, t.failed, sum(t.counts)) for key, t in minutes}
    assert counts == {
        created.replace(second=0, microsecond=0): (1, 1, 0),
        T.replace(second=0, microsecond=0): (1, 0, 1),
    }
    assert [(t.delivered, t.failed) for _, t in hours] == [(1, 1), (1, 0)]
    # Hours keep the latest success and failure; a minute without attempts has none.
    assert hours[1][1].last_success_at == T
    assert minutes[0][1].last_success_at is None


def test_a_minute_without_answers_has_no_histogram() -> None:
    ((_, tally),), _ = rollup([attempt_result("WH1", T, AttemptOutcome.CONNECTION_ERROR, None, 3)])
    assert tally.histogram is None
    assert (tally.last_success_at, tally.last_failure_at) == (None, T)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "window", "rows"),
    [
        # An hour: minute rows only (the window starts and ends within two clock hours).
        ("2026-03-10 14:37:21", StatsWindow.HOUR, ("13:37", "14:00", "14:00")),
        # ... unless it starts on the hour: then that whole hour is one hour row.
        ("2026-03-10 14:00:00", StatsWindow.HOUR, ("13:00", "13:00", "14:00")),
        # A day: minute rows at both ends, whole hours in between.
        ("2026-03-10 14:37:21", StatsWindow.DAY, ("03-09 14:37", "03-09 15:00", "14:00")),
        ("2026-03-10 14:00:59", StatsWindow.DAY, ("03-09 14:00", "03-09 14:00", "14:00")),
        ("2026-03-10 14:37:21", StatsWindow.WEEK, ("03-03 14:37", "03-03 15:00", "14:00")),
    ],
)
def test_which_rows_a_window_reads(now: str, window: StatsWindow, rows: tuple[str, ...]) -> None:
    def moment(text: str) -> datetime:
        day = "2026-" + text.split()[0] if " " in text else "2026-03-10"
        return at(f"{day} {text.split()[-1]}:00")

    assert window_rows(at(now), window) == WindowRows(*(moment(r) for r in rows))


def test_a_window_covers_at_least_its_duration_and_at_most_a_minute_more() -> None:
    for seconds in range(0, 7200, 17):
        now = T + timedelta(seconds=seconds)
        for window in StatsWindow:
            since = window_rows(now, window).since
            assert since.second == since.microsecond == 0
            assert window.duration <= now - since < window.duration + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("retention_days", "cutoffs"),
    [
        # Minute rows: nothing reads further back than the longest window; hour rows tell the
        # latest success and failure of any time, as long as retention keeps what they count.
        (30, (T - health.MINUTES_KEPT, at("2026-02-08 00:00:00"))),
        (8, (T - health.MINUTES_KEPT, at("2026-03-02 00:00:00"))),
        # Retention drops whole days: so do the counts.
        (3, (at("2026-03-07 00:00:00"), at("2026-03-07 00:00:00"))),
        (1, (at("2026-03-09 00:00:00"), at("2026-03-09 00:00:00"))),
    ],
)
def test_rollup_cutoffs(retention_days: int, cutoffs: tuple[datetime, datetime]) -> None:
    assert rollup_cutoffs(T, retention_days) == Cutoffs(*cutoffs)


def test_success_rate() -> None:
    def figures(success: int, failed: int) -> EndpointHealth:
        counts = dict.fromkeys(AttemptOutcome, 0)
        counts[AttemptOutcome.SUCCESS] = success
        counts[AttemptOutcome.BLOCKED] = failed
        return EndpointHealth(StatsWindow.DAY, {}, counts, [0] * BUCKETS, None, None, None)

    assert figures(0, 0).success_rate is None
    assert figures(0, 3).success_rate == 0.0
    assert figures(1, 2).success_rate == 1 / 3
    assert figures(0, 0).response_ms(50) is None


def test_the_recent_minutes_end_with_the_current_one() -> None:
    minutes = health.recent_minutes(T)
    assert len(minutes) == health.MINUTES_SHOWN == 60
    assert minutes[-1] == datetime(2026, 3, 10, 14, 37, tzinfo=UTC)
    assert minutes[0] == datetime(2026, 3, 10, 13, 38, tzinfo=UTC)
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(minutes))
    assert health.recent_minutes(T, 3) == minutes[-3:]


def test_a_minute_without_attempts_counts_zero_of_each_outcome() -> None:
    minutes = health.recent_minutes(T, 3)
    counted = {minutes[1]: {AttemptOutcome.SUCCESS: 2, AttemptOutcome.TIMEOUT: 1}}
    series = health.per_minute(minutes, counted)
    assert [minute for minute, _ in series] == minutes
    none = dict.fromkeys(AttemptOutcome, 0)
    assert series[0][1] == series[2][1] == none
    assert series[1][1] == {**none, AttemptOutcome.SUCCESS: 2, AttemptOutcome.TIMEOUT: 1}
