"""The claim's plan does not depend on statistics, nor on the size of the backlog.

A new user publishes a burst and starts a worker on a database nobody has analyzed
(autovacuum never analyzes a partitioned parent, and a fresh table has no statistics). The
claim must still visit the endpoints through the queue's per-endpoint index and read about as
many entries as it claims, instead of reading and sorting the whole backlog; and when every
endpoint is saturated, it reads an entry per endpoint, not their backlogs.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult, Delivered
from dispatcher.store import queue
from dispatcher.store.database import Database
from tests.conftest import Workspace

WEBHOOKS = 100
EVENTS = 500  # 50,000 pending deliveries, as in the drain
CLAIM = 500
# Statistics a used database kept would change the plans: each test has one nobody used.
pytestmark = pytest.mark.fresh_database


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


async def backlog(db: Database, ws: Workspace) -> None:
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO webhooks (id, workspace_id, url, events, secret) "
            "SELECT 'WH' || g, $1, 'https://x.example.com/' || g, '{contact.updated}', "
            "'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' FROM generate_series(1, $2) g",
            ws.id,
            WEBHOOKS,
        )
        await conn.execute(
            "SELECT dispatcher_publish_event($1, 'contact.updated', "
            "jsonb_build_object('id', 'CT' || g)) FROM generate_series(1, $2) g",
            ws.id,
            EVENTS,
        )


async def explain_claim(db: Database) -> tuple[dict[str, Any], int]:
    """EXPLAIN ANALYZE of one real claim, from the start of the ring, rolled back."""
    async with db.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(queue.INDEX_WALKS_ONLY)
            claim = queue.CLAIM(
                now=datetime.now(UTC),
                owner="engine-x",
                limit=CLAIM,
                default_concurrency=10,
                done_endpoints=[],
                done_counts=[],
                cursor="",
                visits=CLAIM,
            )
            raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + claim.sql, *claim.args)
        finally:
            await tx.rollback()
    plan: dict[str, Any] = orjson.loads(raw)[0]["Plan"]
    (leased,) = [n for n in nodes(plan) if n.get("Subplan Name") == "CTE leased"]
    return plan, int(leased["Actual Rows"])


def queue_reads(plan: dict[str, Any]) -> int:
    """Index entries of delivery_queue the claim read (every index: the ring's probes, each
    endpoint's rows)."""
    scans = [
        n
        for n in nodes(plan)
        if n.get("Relation Name") == "delivery_queue" and "Index" in n["Node Type"]
        and n.get("Index Name") != "delivery_queue_pkey"
    ]  # fmt: skip
    return sum(int(n["Actual Rows"] * n["Actual Loops"]) for n in scans)


async def test_claim_walks_the_due_index_on_a_never_analyzed_database(
    db: Database, ws: Workspace
) -> None:
    await backlog(db, ws)
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM delivery_queue") == WEBHOOKS * EVENTS
        analyzed = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_user_tables WHERE relname = 'delivery_queue' "
            "AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)"
        )
    assert analyzed == 0, "the test needs a database nobody analyzed"
    plan, claimed = await explain_claim(db)
    assert claimed == CLAIM
    queue_scans = [n for n in nodes(plan) if n.get("Relation Name") == "delivery_queue"]
    assert not [n for n in queue_scans if n["Node Type"] == "Seq Scan"], queue_scans
    assert [n for n in queue_scans if n.get("Index Name") == "delivery_queue_webhook"]
    # About as many entries read as rows claimed (a probe per endpoint, its slots' rows), not
    # the 50,000 of the backlog.
    assert queue_reads(plan) <= CLAIM * 2.5, queue_reads(plan)
    # No sort of the backlog anywhere, and no partition of the history read whole.
    big = [
        n
        for n in nodes(plan)
        if n["Node Type"] in ("Sort", "Seq Scan") and n["Actual Rows"] * n["Actual Loops"] > CLAIM
    ]
    assert not big, [(n["Node Type"], n.get("Relation Name"), n["Actual Rows"]) for n in big]
    print(f"\nclaim of {CLAIM} among {WEBHOOKS * EVENTS} due, never analyzed: "
          f"{plan['Actual Total Time']:.1f} ms")  # fmt: skip


async def test_a_claim_reads_an_entry_per_endpoint_when_every_endpoint_is_saturated(
    db: Database, ws: Workspace
) -> None:
    """The backlog's trap: every endpoint at its limit, 50,000 rows due. The claim finds
    nothing, and learns it by a probe per endpoint, not by reading their backlogs."""
    await backlog(db, ws)
    async with db.acquire() as conn:  # ten requests in flight per endpoint: all saturated
        await conn.execute(
            "UPDATE delivery_queue SET lease_owner = 'engine-y', due_at = 'infinity' "
            "WHERE delivery_id IN (SELECT delivery_id FROM (SELECT delivery_id, row_number() "
            "OVER (PARTITION BY webhook_id) AS n FROM delivery_queue) r WHERE n <= 10)"
        )
    plan, claimed = await explain_claim(db)
    assert claimed == 0
    # The ring's probes, and the saturation count's leased rows: 100 endpoints x (1 + 10).
    assert queue_reads(plan) <= WEBHOOKS * 12, queue_reads(plan)


async def test_a_lane_waiting_behind_its_head_is_out_of_the_walk(
    db: Database, ws: Workspace
) -> None:
    """Ordered delivery's trap: a fifo subscription with thousands of events in one lane. The
    claims that first walk them park every one but the head, once; from then on a claim reads
    none of them (the ring's probe of the endpoint finds nothing due), and when the head
    settles, exactly the next one."""
    lane_events = 5000
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO webhooks (id, workspace_id, url, events, secret, ordering) "
            "VALUES ('WHfifo', $1, 'https://x.example.com/', '{contact.updated}', "
            "'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'fifo')",
            ws.id,
        )
        await conn.execute(
            "SELECT dispatcher_publish_event($1, 'contact.updated', "
            "jsonb_build_object('id', 'CT' || g), NULL, 'one lane') FROM generate_series(1, $2) g",
            ws.id,
            lane_events,
        )
    now = datetime.now(UTC)
    claimed: list[queue.Claimed] = []
    for _ in range(lane_events // CLAIM + 1):
        claim = await queue.claim(
            db, owner="engine-a", now=now, limit=CLAIM, default_concurrency=10
        )
        claimed += claim.rows
    (head,) = claimed
    assert head.in_lane
    async with db.acquire() as conn:
        parked = await conn.fetchval(
            "SELECT count(*) FROM delivery_queue WHERE due_at = 'infinity' AND lease_owner IS NULL"
        )
    assert parked == lane_events - 1

    def walked(plan: dict[str, Any]) -> int:
        walks = [n for n in nodes(plan) if n.get("Index Name") == "delivery_queue_webhook"]
        return sum(int(n["Actual Rows"] * n["Actual Loops"]) for n in walks)

    plan, taken = await explain_claim(db)
    # One entry read: the ring's probe, which finds the endpoint has nothing due.
    assert (taken, walked(plan)) == (0, 1)
    result = AttemptResult(
        id=head.id, webhook_id=head.webhook_id, attempts_before=0, response_status=200,
        response_ms=1, last_error=None, finished_at=now, decision=Delivered(now), started_at=now,
        outcome=AttemptOutcome.SUCCESS, response_body=None, in_lane=True,
    )  # fmt: skip
    await queue.record(db, owner="engine-a", results=[result], now=now, disable_after=1e9)
    plan, taken = await explain_claim(db)
    # The probe, and the one row due: the lane's next.
    assert (taken, walked(plan)) == (1, 2)
