"""Endpoint health, as the store keeps it: rollups written as attempts are recorded, the read
behind `GET /v1/webhooks/{id}/stats`, and the minute rows behind `.../stats/minutes` (the
console's chart; queries/stats.sql).

What is counted where (schema.sql has the tables):
- Per endpoint and minute, and per endpoint and hour (`webhook_stats_minutes`,
  `webhook_stats_hours`): the attempts that started then, by outcome, with a histogram of the
  answered ones' response times; the deliveries created then that an attempt settled, by
  status; per hour, the start of the latest success and failure. The recorder adds a batch in
  its record transaction (`record_batch`: one statement, one upsert per endpoint and minute
  or hour), from what RECORD wrote: a late result it dropped is not counted.
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
from dispatcher.domain.health import Cutoffs, EndpointHealth, StatsWindow
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.store.database import Connection, Database
from dispatcher.store.queries import Queries


class SQL(Queries, file="stats.sql"):
    attempts_per_minute: str


# As the engine's statements (store/queue.py: INDEX_WALKS_ONLY, which imports this module):
# plans on the indexes, whatever the statistics of a database nobody has analyzed say.
INDEX_WALKS_ONLY = "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"

# One column per outcome, named as its value (`success`, `http_error`, ...).
OUTCOMES = health.OUTCOMES
_COUNTS = ", ".join(OUTCOMES)
_TOTALS = f"{_COUNTS}, delivered, failed"
B = health.BUCKETS


def _upsert(table: str, key: str, latest: bool) -> str:
    """The upsert of tallies into `table`: counts add up, histograms bucket by bucket (spelled
    out, ARRAY[r.h[1] + x.h[1], ...]: a few microseconds a row, where unnest-and-aggregate costs
    ten times as much on the record path), the latest success and failure keep the later."""
    added = ", ".join(f"r.response_ms[{i}] + excluded.response_ms[{i}]" for i in range(1, B + 1))
    totals = ", ".join(f"{c} = r.{c} + excluded.{c}" for c in (*OUTCOMES, "delivered", "failed"))
    latest_columns = ", last_success_at, last_failure_at" if latest else ""
    latest_updates = (
        """,
        last_success_at = greatest(r.last_success_at, excluded.last_success_at),
        last_failure_at = greatest(r.last_failure_at, excluded.last_failure_at)"""
        if latest
        else ""
    )
    return f"""
    INSERT INTO {table} AS r (webhook_id, {key}, {_TOTALS}, response_ms{latest_columns},
                              engine)
    SELECT webhook_id, starts_at, {_TOTALS}, response_ms{latest_columns}, $14
    FROM tally WHERE span = '{key}'
    -- Each engine ($14) adds to rows of its own: engines never wait on one another here.
    ORDER BY webhook_id, starts_at
    ON CONFLICT (webhook_id, {key}, engine) DO UPDATE
    SET {totals},
        response_ms = CASE WHEN r.response_ms IS NULL THEN excluded.response_ms
                           WHEN excluded.response_ms IS NULL THEN r.response_ms
                           ELSE ARRAY[{added}] END{latest_updates}"""


# A batch's tallies, one element per tally in each array ($12: histograms as array literals,
# NULL for none), minutes then hours, into the two rollups.
RECORD_BATCH = f"""
WITH tally AS (
    SELECT t.span, t.webhook_id, t.starts_at, {", ".join(f"t.{c}" for c in OUTCOMES)},
           t.delivered, t.failed, t.last_success_at, t.last_failure_at,
           t.histogram::integer[] AS response_ms
    FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::int[], $5::int[], $6::int[],
                $7::int[], $8::int[], $9::int[], $10::int[], $11::timestamptz[],
                $12::timestamptz[], $13::text[])
         AS t(span, webhook_id, starts_at, {_TOTALS}, last_success_at, last_failure_at,
              histogram)
), minutes AS ({_upsert("webhook_stats_minutes", "minute", latest=False)}
){_upsert("webhook_stats_hours", "hour", latest=True)}
"""


async def record_batch(
    conn: Connection,
    attempts: Iterable[health.Attempted],
    settled: Iterable[health.Settled],
    engine: str,
) -> None:
    """Add a batch of recorded attempts, and the deliveries they settled, to `engine`'s rows
    of the rollups (one statement; in the record transaction)."""
    arguments = rollup_arguments(attempts, settled)
    if arguments is not None:
        await conn.execute(RECORD_BATCH, *arguments, engine)


def rollup_arguments(
    attempts: Iterable[health.Attempted], settled: Iterable[health.Settled] = ()
) -> tuple[list[Any], ...] | None:
    """RECORD_BATCH's arrays for a batch (None: nothing to add): its minute tallies, then its
    hour tallies, each in key order."""
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
    return tuple(list(column) for column in zip(*rows, strict=True))


_SUMS = ", ".join(f"coalesce(sum({c}), 0) AS {c}" for c in (*OUTCOMES, "delivered", "failed"))

READ = f"""
WITH rows AS (
    -- Minute rows before the first whole hour and from the current hour on (two ranges of
    -- the primary key: the minutes in between are never read), whole hours in between.
    SELECT {_TOTALS}, response_ms FROM webhook_stats_minutes
    WHERE webhook_id = $1 AND minute >= $2 AND minute < $3
    UNION ALL
    SELECT {_TOTALS}, response_ms FROM webhook_stats_minutes
    WHERE webhook_id = $1 AND minute >= $4
    UNION ALL
    SELECT {_TOTALS}, response_ms FROM webhook_stats_hours
    WHERE webhook_id = $1 AND hour >= $3 AND hour < $4
), totals AS (
    SELECT {_SUMS},
           array_agg(response_ms) FILTER (WHERE response_ms IS NOT NULL) AS histograms
    FROM rows
), changes AS (
    SELECT coalesce(sum(delivered), 0) AS delivered, coalesce(sum(failed), 0) AS failed
    FROM webhook_status_changes
    WHERE webhook_id = $1 AND minute >= $2
), latest AS (
    -- Walking back the endpoint's hours to the latest one with a success (a failure): at
    -- most the hours kept, however long ago.
    -- (every engine's rows of the latest such hour).
    SELECT (SELECT max(last_success_at) FROM webhook_stats_hours
            WHERE webhook_id = $1 AND hour = (
                SELECT max(hour) FROM webhook_stats_hours
                WHERE webhook_id = $1 AND last_success_at IS NOT NULL)) AS last_success_at,
           (SELECT max(last_failure_at) FROM webhook_stats_hours
            WHERE webhook_id = $1 AND hour = (
                SELECT max(hour) FROM webhook_stats_hours
                WHERE webhook_id = $1 AND last_failure_at IS NOT NULL)) AS last_failure_at
)
SELECT t.*, c.delivered AS changed_delivered, c.failed AS changed_failed,
       -- The queue holds exactly the pending deliveries: this costs the endpoint's backlog.
       (SELECT count(*) FROM delivery_queue q
        WHERE q.webhook_id = $1 AND q.created_at >= $2) AS pending,
       l.last_success_at, l.last_failure_at,
       -- Failing: the run of failures started with the first attempt after the latest
       -- success (every later one failed). The attempt log is asked only then; should the
       -- run be older than the log (retention), its latest failure is what is known.
       CASE WHEN l.last_failure_at > coalesce(l.last_success_at, '-infinity') THEN
           coalesce((SELECT min(a.created_at) FROM delivery_attempts a
                     WHERE a.webhook_id = $1
                       AND a.created_at > coalesce(l.last_success_at, '-infinity')),
                    l.last_failure_at)
       END AS failing_since
FROM totals t CROSS JOIN changes c CROSS JOIN latest l
"""


async def read(db: Database, webhook_id: str, now: datetime, window: StatsWindow) -> EndpointHealth:
    """One endpoint's figures over `window` back from `now`, from one snapshot (one statement).
    The caller has checked that the webhook is the workspace's."""
    rows = health.window_rows(now, window)
    async with db.transaction() as conn:
        await conn.execute(INDEX_WALKS_ONLY)
        row = await conn.fetchrow(READ, webhook_id, rows.since, rows.hours_from, rows.hours_until)
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
    )


async def attempts_per_minute(
    db: Database, webhook_id: str, since: datetime
) -> dict[datetime, dict[AttemptOutcome, int]]:
    """One endpoint's attempts by outcome for each minute from `since` (a minute's start) on
    that has any. The caller has checked that the webhook is the workspace's."""
    async with db.acquire() as conn:
        rows = await conn.fetch(SQL.attempts_per_minute, webhook_id, since)
    return {row["minute"]: {outcome: row[outcome] for outcome in OUTCOMES} for row in rows}


async def forget_before(conn: Connection, cutoffs: Cutoffs) -> int:
    """Delete rollup rows past their use or retention (the maintenance loop); returns how
    many."""
    deleted = 0
    for sql, cutoff in (
        ("DELETE FROM webhook_stats_minutes WHERE minute < $1", cutoffs.minutes),
        ("DELETE FROM webhook_status_changes WHERE minute < $1", cutoffs.minutes),
        ("DELETE FROM webhook_stats_hours WHERE hour < $1", cutoffs.hours),
    ):
        result: str = await conn.execute(sql, cutoff)
        deleted += int(result.split()[-1])
    return deleted
