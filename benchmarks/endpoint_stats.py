"""How fast `GET /v1/webhooks/{id}/stats` answers for an endpoint with a million attempts and a
million deliveries in its 7-day window (issue #14's target: under 100 ms).

    DATABASE_URL=postgresql://... python -m benchmarks.endpoint_stats [--attempts 1000000]

A measurement to run by hand, not a timed test. It makes its own database (dropped at the
end), and writes the history the way the service does, at the scale asked:
- one delivery per attempt, spread over 7 days, each settled by its one attempt (outcomes and
  response times drawn from a fixed seed): the deliveries and the attempt log rows, and the
  rollups through the recorder's own statement (`store.stats.record_batch`), 500 per batch;
- a backlog of pending deliveries sits in the queue;
- five other endpoints get a tenth of that traffic each, so the tables are not the measured
  endpoint's alone.
Then it asks the API (served on loopback, with a real key) for each window, and prints the
median, p95 and worst of the answers' times, the 7-day figures beside the same counts taken by
a scan of the history (they must agree), and what one scan of the attempt log for the figures
takes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
from aiohttp import web

from dispatcher import log
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import SCOPES, Services
from dispatcher.domain import health
from dispatcher.domain.clock import SystemClock
from dispatcher.domain.health import SettledDelivery
from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult
from dispatcher.settings import Settings
from dispatcher.store import schema, stats, workspaces
from dispatcher.store.database import Database
from tests.records import attempt_result

OUTCOMES = [
    (AttemptOutcome.SUCCESS, 0.90),
    (AttemptOutcome.HTTP_ERROR, 0.06),
    (AttemptOutcome.TIMEOUT, 0.02),
    (AttemptOutcome.CONNECTION_ERROR, 0.015),
    (AttemptOutcome.BLOCKED, 0.005),
]
OTHERS = 5
BACKLOG = 2_000
REQUESTS = 40
WEEK = 7 * 86400


def draw(rand: random.Random, webhook_id: str, now: datetime, delivery_id: str) -> AttemptResult:
    """A delivery's one attempt, as the engine hands it to the recorder: delivered when it
    succeeded, given up otherwise."""
    outcome = rand.choices([o for o, _ in OUTCOMES], [w for _, w in OUTCOMES])[0]
    started = now - timedelta(seconds=rand.uniform(0, WEEK))
    status: int | None
    if outcome == AttemptOutcome.SUCCESS:
        status, ms = 200, int(rand.lognormvariate(4.0, 0.8))
    elif outcome == AttemptOutcome.HTTP_ERROR:
        status, ms = 500, int(rand.lognormvariate(3.0, 1.0))
    else:
        status, ms = None, rand.randrange(1, 15000)
    return attempt_result(webhook_id, started, outcome, status, ms, delivery_id=delivery_id)


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def write_history(db: Database, webhook_id: str, workspace_id: str, n: int) -> None:
    """`n` deliveries over the last week, each settled by its one attempt, as the service
    writes them: the history rows, and the rollups through the recorder's own statement, 500
    per batch (see the module's docstring)."""
    rand = random.Random(webhook_id)
    now = datetime.now(UTC)
    done = 0
    while done < n:
        attempts = [
            draw(rand, webhook_id, now, f"WD{webhook_id[2:10]}{number:024d}")
            for number in range(done, done + min(500, n - done))
        ]
        deliveries = []
        settled = []
        logged = []
        for number, attempt in enumerate(attempts, done):
            delivery_id = attempt.id
            created = attempt.started_at - timedelta(milliseconds=rand.randrange(1, 500))
            status = "delivered" if attempt.outcome == AttemptOutcome.SUCCESS else "failed"
            deliveries.append(
                (delivery_id, workspace_id, webhook_id, f"EV{number}", "contact.updated",
                 status, 1, created, attempt.response_status, attempt.response_ms)
            )  # fmt: skip
            settled.append(SettledDelivery(webhook_id, created, status))
            logged.append(
                (f"WA{webhook_id[2:10]}{number:024d}", delivery_id, webhook_id, created, 1,
                 attempt.started_at, attempt.response_status, attempt.response_ms,
                 attempt.outcome.value, "schedule")
            )  # fmt: skip
        async with db.transaction() as conn:
            await conn.copy_records_to_table(
                "deliveries",
                records=deliveries,
                columns=["id", "workspace_id", "webhook_id", "event_id", "event_type", "status",
                         "attempts", "created_at", "response_status", "response_ms"],
            )  # fmt: skip
            await conn.copy_records_to_table(
                "delivery_attempts",
                records=logged,
                columns=["id", "delivery_id", "webhook_id", "delivery_created_at",
                         "attempt_number", "created_at", "response_status", "response_ms",
                         "outcome", "trigger"],
            )  # fmt: skip
            await stats.record_batch(conn, attempts, settled, "bench")
        done += len(attempts)


async def write_backlog(db: Database, webhook_id: str, workspace_id: str) -> None:
    async with db.acquire() as conn:
        await conn.execute(
            """
            WITH made AS (
                INSERT INTO deliveries (id, workspace_id, webhook_id, event_id, event_type,
                                        created_at, next_attempt_at)
                SELECT dispatcher_new_id('WD'), $1, $2, 'EVB' || g, 'contact.updated',
                       now() - g * interval '1 second', now()
                FROM generate_series(1, $3) g
                RETURNING id, created_at, webhook_id, event_id
            )
            INSERT INTO delivery_queue (delivery_id, created_at, webhook_id, event_id, due_at)
            SELECT id, created_at, webhook_id, event_id, now() + interval '1 hour' FROM made
            """,
            workspace_id,
            webhook_id,
            BACKLOG,
        )


async def measure(url: str, key: str, path: str) -> list[float]:
    took: list[float] = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as session:
        for _ in range(REQUESTS):
            started = time.perf_counter()
            async with session.get(url + path) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
            took.append((time.perf_counter() - started) * 1000)
    return took


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.endpoint_stats")
    parser.add_argument("--attempts", type=int, default=1_000_000)
    args = parser.parse_args()
    log.configure("console", "warning")
    server = os.environ.get("DATABASE_URL")
    if not server:
        sys.exit("set DATABASE_URL to a Postgres server (a database is made and dropped there)")
    name = f"bench_stats_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server)
    await admin.execute(f'CREATE DATABASE "{name}"')
    db = await Database.open(with_database(server, name), min_size=2, max_size=4)
    try:
        await schema.apply_schema(db)
        async with db.acquire() as conn:
            await conn.execute(
                "SELECT dispatcher_ensure_partitions(current_date - 8, current_date + 2)"
            )
        workspace_id = await workspaces.create_workspace(db, "bench")
        _, key = await workspaces.create_key(db, workspace_id, sorted(SCOPES))
        hooks = [f"WH{uuid.uuid4().hex}" for _ in range(OTHERS + 1)]
        async with db.acquire() as conn:
            await conn.executemany(
                "INSERT INTO webhooks (id, workspace_id, url, events, secret) "
                "VALUES ($1, $2, 'https://example.com/', '{contact.updated}', 'whsec_x')",
                [(hook, workspace_id) for hook in hooks],
            )
        measured, others = hooks[0], hooks[1:]
        started = time.perf_counter()
        print(f"writing {args.attempts:,} deliveries and attempts for the measured endpoint ...")
        await write_history(db, measured, workspace_id, args.attempts)
        print(f"writing a tenth of that for each of {OTHERS} other endpoints ...")
        for hook in others:
            await write_history(db, hook, workspace_id, args.attempts // 10)
        await write_backlog(db, measured, workspace_id)
        async with db.acquire() as conn:
            await conn.execute("VACUUM ANALYZE")
        print(f"history written in {time.perf_counter() - started:.0f} s")

        services = Services(
            db=db,
            settings=Settings(database_url=db.url),
            clock=SystemClock(),
            cursor_key=await workspaces.instance_secret(db, "cursor"),
        )
        runner = web.AppRunner(create_app(services))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            print(f"\nGET /v1/webhooks/{{id}}/stats, {REQUESTS} requests per window, loopback:")
            for window in ("1h", "24h", "7d"):
                path = f"/v1/webhooks/{measured}/stats?window={window}"
                took = sorted(await measure(f"http://127.0.0.1:{port}", key, path))
                print(
                    f"  window={window:>3}: median {statistics.median(took):6.1f} ms, "
                    f"p95 {took[int(len(took) * 0.95)]:6.1f} ms, worst {took[-1]:6.1f} ms"
                )
            async with (
                aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as session,
                session.get(
                    f"http://127.0.0.1:{port}/v1/webhooks/{measured}/stats?window=7d"
                ) as resp,
            ):
                body = await resp.json()
            print(f"  7d figures: {body}")
            # The same counts, by a scan of the history (the window's start as the API had it).
            since = health.window_rows(datetime.now(UTC), health.StatsWindow.WEEK).since
            async with db.acquire() as conn:
                truth = await conn.fetch(
                    "SELECT status AS name, count(*) AS n FROM deliveries "
                    "WHERE webhook_id = $1 AND created_at >= $2 GROUP BY 1 UNION ALL "
                    "SELECT outcome, count(*) FROM delivery_attempts "
                    "WHERE webhook_id = $1 AND created_at >= $2 GROUP BY 1 ORDER BY 1",
                    measured,
                    since,
                )
            print("  counted by a scan instead:", {row["name"]: row["n"] for row in truth})
        finally:
            await runner.cleanup()

        async with db.acquire() as conn:
            scan_started = time.perf_counter()
            await conn.fetch(
                "SELECT outcome, count(*), percentile_disc(ARRAY[0.5, 0.95, 0.99]) "
                "WITHIN GROUP (ORDER BY response_ms) FROM delivery_attempts "
                "WHERE webhook_id = $1 AND created_at >= now() - interval '7 days' "
                "GROUP BY outcome",
                measured,
            )
            scan = (time.perf_counter() - scan_started) * 1000
        print(f"\nfor comparison, one scan of the attempt log for the 7d figures: {scan:.0f} ms")
    finally:
        await db.close()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
