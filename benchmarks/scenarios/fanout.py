"""9. Fan-out: one event to 10,000 subscriptions; time to enqueue.

10,000 webhooks in one workspace all hear `contact.updated`; the harness publishes one event
with `dispatcher_publish_event` (one transaction: the event, 10,000 deliveries, a NOTIFY;
committed with fsync on) and times the call, a few times over (no engine runs, so nothing is
drained meanwhile). Baseline, same database, same run: a plain INSERT … SELECT of 10,000 rows
of the same columns into an unindexed, unconstrained copy of the deliveries table (the cost of
writing that many rows at all). Then the same again with a payload filter on every
subscription (`{"direction": "incoming", "account": {"tier": "gold"}}`, which the event's data
contains: every filter is evaluated and every delivery still made). Then the worst the
bounds on filters allow (dispatcher/domain/payload_filter.py, docs/webhooks.md): on every
subscription a filter at every bound (16 values, 4 array elements), against the largest
event (data of about 1 MiB, the API's body limit: an array at the compared bound, 128
elements, each of the filter's elements found only at its end, beside 12,000 keys sharing a
prefix with the filter's and a bulk array), which the data contains: every comparison does
all its work and every delivery is made; beside it, the same event unfiltered and the filter
step alone (the rule over the 10,000 subscriptions, nothing written), for information.
Target: every enqueue under 1 s, filtered or not, the worst case included. The database is
created for the run and never ANALYZEd by the harness (autovacuum as the server ships it).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from benchmarks.common import (
    EVENT_TYPE,
    Run,
    create_webhooks,
    create_workspace,
    fresh_database,
    percentile,
)
from dispatcher.domain.payload_filter import (
    MAX_COMPARED_ARRAY_ELEMENTS,
    MAX_FILTER_ARRAY_ELEMENTS,
    MAX_FILTER_BYTES,
    MAX_FILTER_VALUES,
    filter_problem,
)

NAME = "fanout"
TITLE = "9. Fan-out (1 event → 10,000 subscriptions)"
TARGET_S = 1.0
SUBSCRIPTIONS = 10_000
PLAIN = """
INSERT INTO plain_deliveries
    (id, workspace_id, webhook_id, event_id, event_type, created_at, next_attempt_at)
SELECT dispatcher_new_id('WD'), w.workspace_id, w.id, $1, $2, now(), now()
FROM webhooks w
"""
FILTER = {"direction": "incoming", "account": {"tier": "gold"}}
FILTERED_DATA = (
    "jsonb_build_object('id', $3::text, 'direction', 'incoming', "
    "'account', jsonb_build_object('tier', 'gold', 'seats', 3), 'text', repeat('x', 200))"
)

BODY_LIMIT = 1024 * 1024


def worst_case() -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter at every bound and the largest data that contains it. Its array: numbers
    of 18 digits (numbers cost more to compare than strings, measured; an API filter's
    integers stop at 64 bits), found last in a data array of numbers at the compared bound
    that share all but their last digits, so a search reads the whole array for each. Its
    other values: keys sharing a long prefix with 12,000 keys of the data (the longest key
    searches), the rest of the 1 MiB body a bulk array."""
    base = 10**17
    array = [base + i for i in range(MAX_COMPARED_ARRAY_ELEMENTS)]
    keys = MAX_FILTER_VALUES - 1 - MAX_FILTER_ARRAY_ELEMENTS
    prefix = "k" * 40
    wanted: dict[str, Any] = {"tags": array[-MAX_FILTER_ARRAY_ELEMENTS:]}
    wanted |= {f"{prefix}{i:05d}": f"v{i}" for i in range(keys)}
    assert filter_problem(wanted) is None and len(orjson.dumps(wanted)) <= MAX_FILTER_BYTES
    data: dict[str, Any] = {"id": "WORST", "tags": array}
    data |= {f"{prefix}{i:05d}": f"v{i}" for i in range(12_000)}
    room = BODY_LIMIT - len(orjson.dumps({"type": EVENT_TYPE, "data": data})) - 64
    data["bulk"] = [0] * (room // 2)  # "0," per element
    assert len(orjson.dumps({"type": EVENT_TYPE, "data": data})) <= BODY_LIMIT
    return wanted, data


async def run(r: Run) -> dict[str, Any]:
    repeats = 3 if r.quick else 5
    async with fresh_database(r, NAME) as (db, _url):
        workspace = await create_workspace(db)
        await create_webhooks(db, workspace, ["http://127.0.0.1:9/never"] * SUBSCRIPTIONS)
        async with db.acquire() as conn:
            await conn.execute("CREATE TABLE plain_deliveries (LIKE deliveries INCLUDING DEFAULTS)")
            fanout_s, plain_s, counts = [], [], []
            for i in range(repeats):
                started = time.perf_counter()
                event_id = await conn.fetchval(
                    "SELECT dispatcher_publish_event($1, $2, jsonb_build_object('id', $3::text))",
                    workspace,
                    EVENT_TYPE,
                    f"FAN{i}",
                )
                fanout_s.append(time.perf_counter() - started)
                counts.append(
                    await conn.fetchval(
                        "SELECT count(*) FROM deliveries WHERE event_id = $1", event_id
                    )
                )
                started = time.perf_counter()
                await conn.execute(PLAIN, event_id, EVENT_TYPE)
                plain_s.append(time.perf_counter() - started)
            await conn.execute("UPDATE webhooks SET payload_filter = $1", FILTER)
            filtered_s = []
            for i in range(repeats):
                started = time.perf_counter()
                event_id = await conn.fetchval(
                    f"SELECT dispatcher_publish_event($1, $2, {FILTERED_DATA})",
                    workspace,
                    EVENT_TYPE,
                    f"FILTERED{i}",
                )
                filtered_s.append(time.perf_counter() - started)
                counts.append(
                    await conn.fetchval(
                        "SELECT count(*) FROM deliveries WHERE event_id = $1", event_id
                    )
                )
            worst_filter, worst_data = worst_case()

            async def publish_largest(prefix: str) -> list[float]:
                """Publish the largest event `repeats` times: the seconds of each."""
                seconds = []
                for i in range(repeats):
                    started = time.perf_counter()
                    event_id = await conn.fetchval(
                        "SELECT dispatcher_publish_event($1, $2, $3::jsonb)",
                        workspace,
                        EVENT_TYPE,
                        {**worst_data, "id": f"{prefix}{i}"},
                    )
                    seconds.append(time.perf_counter() - started)
                    counts.append(
                        await conn.fetchval(
                            "SELECT count(*) FROM deliveries WHERE event_id = $1", event_id
                        )
                    )
                return seconds

            # The largest event without filters first: what its size costs by itself.
            await conn.execute("UPDATE webhooks SET payload_filter = NULL")
            largest_s = await publish_largest("LARGEST")
            await conn.execute("UPDATE webhooks SET payload_filter = $1", worst_filter)
            # The filter step alone (for information): the same rule over the 10,000
            # subscriptions, the event's data parsed once, nothing written.
            step_s = []
            for _ in range(repeats):
                started = time.perf_counter()
                passed = await conn.fetchval(
                    "SELECT count(*) FROM webhooks w WHERE dispatcher_filter_passes("
                    "(SELECT $1::text::jsonb), w.payload_filter, w.payload_filter_arrays, NULL)",
                    orjson.dumps(worst_data).decode(),
                )
                step_s.append(time.perf_counter() - started)
                if passed != SUBSCRIPTIONS:
                    raise RuntimeError(f"the worst filter passed {passed} subscriptions")
            worst_s = await publish_largest("WORST")
    if any(c != SUBSCRIPTIONS for c in counts):
        raise RuntimeError(f"fan-out made {counts} deliveries, expected {SUBSCRIPTIONS} each")
    value, worst = percentile(fanout_s, 50), max(fanout_s)
    filtered, filtered_worst = percentile(filtered_s, 50), max(filtered_s)
    worst_median, worst_worst = percentile(worst_s, 50), max(worst_s)
    slowest = max(worst, filtered_worst, worst_worst)
    baseline = percentile(plain_s, 50)
    share = value / baseline
    r.log(
        f"fanout: {value * 1000:.0f} ms (worst {worst * 1000:.0f} ms); "
        f"filtered {filtered * 1000:.0f} ms (worst {filtered_worst * 1000:.0f} ms); "
        f"largest event, no filter {percentile(largest_s, 50) * 1000:.0f} ms; "
        f"filter step alone {percentile(step_s, 50) * 1000:.0f} ms; "
        f"bounds' worst {worst_median * 1000:.0f} ms (worst {worst_worst * 1000:.0f} ms); "
        f"plain {baseline * 1000:.0f} ms"
    )
    return {
        "title": TITLE,
        "parameters": {
            "subscriptions": SUBSCRIPTIONS,
            "repeats": repeats,
            "database": "created for the run; no ANALYZE/VACUUM by the harness",
        },
        "measured": {
            "value": value,
            "unit": "s (median)",
            "worst_s": worst,
            "runs_s": fanout_s,
            "deliveries_per_event": counts,
            "filtered_s": filtered,
            "filtered_worst_s": filtered_worst,
            "filtered_runs_s": filtered_s,
            "filter": FILTER,
            "largest_event_unfiltered_s": percentile(largest_s, 50),
            "largest_event_unfiltered_runs_s": largest_s,
            "filter_step_alone_s": percentile(step_s, 50),
            "filter_step_alone_runs_s": step_s,
            "bounds_worst_s": worst_median,
            "bounds_worst_worst_s": worst_worst,
            "bounds_worst_runs_s": worst_s,
            "bounds_worst_filter": worst_filter,
            "bounds_worst_event_bytes": len(orjson.dumps(worst_data)),
        },
        "baseline": {
            "name": "plain INSERT of 10,000 rows into an unindexed copy",
            "value": baseline,
            "unit": "s (median)",
            "runs_s": plain_s,
        },
        "ratio": share,
        "ratio_to_target": slowest / TARGET_S,
        "target": {
            "text": (
                "< 1 s, with or without a filter on every subscription, the worst filter "
                "and largest event the bounds allow included"
            ),
            "op": "<",
            "value": TARGET_S,
        },
        "met": slowest < TARGET_S,
        "summary": {
            "measured": (
                f"{value * 1000:,.0f} ms median, {worst * 1000:,.0f} ms worst (x{repeats}); "
                f"filtered {filtered * 1000:,.0f} ms median, "
                f"{filtered_worst * 1000:,.0f} ms worst; "
                f"bounds' worst filter x 1 MiB event {worst_median * 1000:,.0f} ms median, "
                f"{worst_worst * 1000:,.0f} ms worst (that event unfiltered "
                f"{percentile(largest_s, 50) * 1000:,.0f} ms; the filter step alone "
                f"{percentile(step_s, 50) * 1000:,.0f} ms)"
            ),
            "baseline": f"plain 10k-row INSERT {baseline * 1000:,.0f} ms",
            "ratio": f"{share:.1f}x plain insert; worst = {slowest / TARGET_S:.2f} of target",
        },
    }
