"""Endpoint health, as the store keeps it: rollups written as attempts are recorded, the read
behind `GET /v1/webhooks/{id}/stats`, and the minute rows behind `.../stats/minutes` (the
console's chart). The statements are in queries/stats.sql, written out column by column and
bucket by bucket; tests/store/test_queries.py checks them against `dispatcher.domain.health`
(OUTCOMES, BUCKETS), the one home of the outcomes and of the histogram's layout.

What is counted where (schema.sql has the tables):
- Per endpoint and minute, and per endpoint and hour (`webhook_stats_minutes`,
  `webhook_stats_hours`): the attempts that started then, by outcome, with a histogram of the
  answered ones' response times; the deliveries created then that an attempt settled, by
  status; per hour, the start of the latest success and failure. The recorder adds a batch in
  its record transaction (`record_batch`: one statement, one upsert per endpoint and minute
  or hour), from what the engine's record statement (queries/queue.sql) wrote: a late result
  it dropped is not counted.
- Changes of a delivery's status made without an attempt (give-ups, retries, recovers), per
  endpoint and minute of creation (`webhook_status_changes`): kept by a trigger, whoever
  makes them.
- Pending deliveries are counted from the queue, which holds exactly those: publishing writes
  nothing for the stats.
- When an endpoint started failing: the first attempt after its latest success, read from the
  attempt log (one index probe per partition).

So a read costs about the same whatever the traffic: a week reads some 170 hour rows, at most
two hours of minute rows, the week's status changes (rare) and the endpoint's backlog in the
queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from dispatcher.domain import health
from dispatcher.domain.enums import DeliveryStatus
from dispatcher.domain.health import Cutoffs, EndpointHealth, SettledDelivery, StatsWindow
from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult
from dispatcher.store import queries
from dispatcher.store.database import Connection, Database
from dispatcher.store.queries import Queries, Statement


class SQL(Queries, file="stats.sql"):
    record_batch: Statement
    endpoint_health: Statement
    attempts_per_minute: Statement
    forget_minutes: Statement
    forget_status_changes: Statement
    forget_hours: Statement


# The engine's planner settings (queries/queue.sql, store/queue.py, which imports this module):
# plans on the indexes, whatever the statistics of a database nobody has analyzed say.
INDEX_WALKS_ONLY = queries.load("queue.sql")["index_walks_only"].sql

# The rollups' count columns, one per outcome, named as its value (`success`, ...).
OUTCOMES = health.OUTCOMES
# The arrays of `record_batch` (stats.sql), by the names it gives them, in a tally row's order.
ROLLUP_ARRAYS = (
    "spans", "webhook_ids", "starts_at", *map(str, OUTCOMES), "delivered", "failed",
    "last_success_at", "last_failure_at", "histograms",
)  # fmt: skip


async def record_batch(
    conn: Connection,
    attempts: Iterable[AttemptResult],
    settled: Iterable[SettledDelivery],
    engine: str,
) -> None:
    """Add a batch of recorded attempts, and the deliveries they settled, to `engine`'s rows
    of the rollups (one statement; in the record transaction)."""
    arguments = rollup_arguments(attempts, settled)
    if arguments is not None:
        await conn.execute(*SQL.record_batch(**arguments, engine=engine))


def rollup_arguments(
    attempts: Iterable[AttemptResult], settled: Iterable[SettledDelivery] = ()
) -> dict[str, list[Any]] | None:
    """The arrays of `SQL.record_batch`, by name, for a batch (None: nothing to add): its
    minute tallies, then its hour tallies, each in key order."""
    minutes, hours = health.rollup(attempts, settled)
    if not minutes:
        return None
    literals: dict[int, str] = {}  # an hour of one minute shares that minute's histogram

    def literal(histogram: list[int] | None) -> str | None:
        if histogram is None:
            return None
        found = literals.get(id(histogram))
        if found is None:
            # `str` of a list is a C loop, and '{1, 0}' is valid array input.
            found = literals[id(histogram)] = f"{{{str(histogram)[1:-1]}}}"
        return found

    rows = [
        (span, webhook_id, start, *tally.counts, tally.delivered, tally.failed,
         tally.last_success_at, tally.last_failure_at, literal(tally.histogram))
        for span, tallies in (("minute", minutes), ("hour", hours))
        for (webhook_id, start), tally in tallies
    ]  # fmt: skip
    return {
        name: list(column)
        for name, column in zip(ROLLUP_ARRAYS, zip(*rows, strict=True), strict=True)
    }


async def read(db: Database, webhook_id: str, now: datetime, window: StatsWindow) -> EndpointHealth:
    """One endpoint's figures over `window` back from `now`, from one snapshot (one statement).
    The caller has checked that the webhook is the workspace's."""
    rows = health.window_rows(now, window)
    async with db.transaction() as conn:
        await conn.execute(INDEX_WALKS_ONLY)
        row = await conn.fetchrow(
            *SQL.endpoint_health(
                webhook_id=webhook_id,
                since=rows.since,
                hours_from=rows.hours_from,
                hours_until=rows.hours_until,
            )
        )
    assert row is not None
    # Never below 0: a delivery settled before the rollups existed (schema 7) was not
    # counted then, yet a retry of it is counted as it leaves its status.
    delivered = max(row["delivered"] + row["changed_delivered"], 0)
    failed = max(row["failed"] + row["changed_failed"], 0)
    return EndpointHealth(
        window=window,
        deliveries={
            DeliveryStatus.PENDING: row["pending"],
            DeliveryStatus.DELIVERED: delivered,
            DeliveryStatus.FAILED: failed,
        },
        attempts={outcome: row[outcome] for outcome in OUTCOMES},
        histogram=health.add_histograms(row["histograms"] or ()),
        last_success_at=row["last_success_at"],
        last_failure_at=row["last_failure_at"],
        failing_since=row["failing_since"],
        effective_rate=row["effective_rate"],
    )


async def attempts_per_minute(
    db: Database, webhook_id: str, since: datetime
) -> dict[datetime, dict[AttemptOutcome, int]]:
    """One endpoint's attempts by outcome for each minute from `since` (a minute's start) on
    that has any. The caller has checked that the webhook is the workspace's."""
    async with db.acquire() as conn:
        rows = await conn.fetch(*SQL.attempts_per_minute(webhook_id=webhook_id, since=since))
    return {row["minute"]: {outcome: row[outcome] for outcome in OUTCOMES} for row in rows}


async def forget_before(conn: Connection, cutoffs: Cutoffs) -> int:
    """Delete rollup rows past their use or retention (the maintenance loop); returns how
    many."""
    deleted = 0
    for sql, cutoff in (
        (SQL.forget_minutes, cutoffs.minutes),
        (SQL.forget_status_changes, cutoffs.minutes),
        (SQL.forget_hours, cutoffs.hours),
    ):
        result: str = await conn.execute(*sql(before=cutoff))
        deleted += int(result.split()[-1])
    return deleted
