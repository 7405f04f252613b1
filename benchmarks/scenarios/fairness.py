"""14. Fairness: a quiet workspace's events while another drains a deep backlog (#22).

On a database created for the run (no ANALYZE), a loud workspace has 100 webhooks to the
shared fast sink and a backlog of 200,000 deliveries (2,000 per webhook), published through the
SQL outbox before one `dispatcher worker` (the product's defaults) starts. Once the worker
sends, a quiet workspace with one webhook (to a second sink, in verify mode: signatures
checked, receive times recorded) publishes 10 events/s through the SQL outbox, each in its own
transaction, for the rest of the drain (at most 60 s).

Figures: the quiet events' publish → received p50/p99 (publish time: before the connection is
taken), and the loud drain's rate ÷ the same drain alone (measured first, on its own fresh
database). Targets: quiet p99 < 250 ms; the loud one keeps ≥ 0.8 of its rate alone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.common import (
    EVENT_TYPE,
    Run,
    count_status,
    create_webhooks,
    create_workspace,
    fresh_database,
    percentile,
    publish_events,
    start_sink,
    start_worker,
    stop_process,
    wait_for_count,
    wait_until,
)
from benchmarks.scenarios.drain import dispatcher_drain
from dispatcher.domain.signing import new_secret

NAME = "fairness"
TITLE = "14. Fairness (a quiet workspace beside a 200,000-delivery backlog)"
TARGET_TEXT = "quiet p99 publish -> received < 250 ms; loud >= 0.8 of its rate alone"
P99_TARGET_MS = 250.0
SHARE_TARGET = 0.8
LOUD_WEBHOOKS = 100
QUIET_RATE = 10.0
PUBLISH = "SELECT dispatcher_publish_event($1, $2, jsonb_build_object('id', $3::text))"


async def run(r: Run) -> dict[str, Any]:
    sink = await r.shared_sink()
    n = r.size(200_000, 20_000)
    alone = await dispatcher_drain(r, sink, n, scenario="fairness_alone", subscriptions=100)
    r.log(f"fairness: loud alone {alone['rate']:,.0f} deliveries/s")
    secret = new_secret()
    quiet_sink = await start_sink(r, "verify", secret=secret, record=True, name="sink-quiet")
    try:
        shared = await _beside(r, sink, quiet_sink, secret, n)
    finally:
        await stop_process(r, quiet_sink.proc)
    share = shared["loud_rate"] / alone["rate"]
    p99 = shared["quiet"]["p99_ms"]
    met = p99 < P99_TARGET_MS and share >= SHARE_TARGET and shared["quiet"]["lost"] == 0
    return {
        "title": TITLE,
        "parameters": {
            "loud_deliveries": n,
            "loud_webhooks": LOUD_WEBHOOKS,
            "quiet_rate_per_s": QUIET_RATE,
            "database": "created for each drain; no ANALYZE/VACUUM by the harness",
        },
        "measured": {"value": p99, "unit": "ms, quiet p99 publish -> received", **shared},
        "baseline": {"name": "the loud drain alone", "value": alone["rate"]},
        "ratio": share,
        "target": {"text": TARGET_TEXT},
        "met": met,
        "summary": {
            "measured": f"quiet p50 {shared['quiet']['p50_ms']:,.1f} / p99 {p99:,.1f} ms "
            f"({shared['quiet']['received']} events, {shared['quiet']['lost']} lost); loud "
            f"{shared['loud_rate']:,.0f} deliveries/s meanwhile",
            "baseline": f"loud alone {alone['rate']:,.0f} deliveries/s",
            "ratio": f"loud keeps {share:.2f} of its rate; quiet p99 = "
            f"{p99 / P99_TARGET_MS:.2f} of 250 ms",
        },
    }


async def _beside(r: Run, sink: Any, quiet_sink: Any, secret: str, n: int) -> dict[str, Any]:
    """The loud drain with the quiet workspace publishing beside it."""
    async with fresh_database(r, "fairness", pool_size=4) as (db, url):
        loud = await create_workspace(db, "loud")
        await create_webhooks(db, loud, [sink.url(f"/hook/{i}") for i in range(LOUD_WEBHOOKS)])
        events = n // LOUD_WEBHOOKS
        await publish_events(r, db, loud, events, fanout=LOUD_WEBHOOKS, desc="fairness: loud")
        quiet = await create_workspace(db, "quiet")
        await create_webhooks(db, quiet, [quiet_sink.url("/quiet")], secret=secret)
        await sink.reset()
        await quiet_sink.reset()
        worker = start_worker(r, url, name="fairness-worker")
        try:

            async def sending() -> bool:
                if not worker.alive():
                    raise RuntimeError(f"worker exited:\n{worker.tail()}")
                return bool((await sink.stats())["count"])

            await wait_until(sending, within=60, interval=0.05, what="the first delivery")
            published: dict[str, float] = {}
            loop = asyncio.get_running_loop()
            start = loop.time()
            i = 0
            # Publish until the loud backlog is nearly drained (never after it: then the quiet
            # events would be measured on an idle engine), or 60 s.
            while loop.time() - start < 60:
                if await count_status(db) >= n * 0.9:
                    break
                key = f"quiet{i}"
                before = time.time()
                async with db.acquire() as conn:
                    await conn.execute(PUBLISH, quiet, EVENT_TYPE, key)
                published[key] = before
                i += 1
                await asyncio.sleep(max(0.0, start + i / QUIET_RATE - loop.time()))
            done_at = await wait_for_count(
                r, db, n + len(published), within=max(120.0, n / 500), desc="fairness: drain",
                procs=[worker],
            )  # fmt: skip
            stats = await sink.stats()
        finally:
            await stop_process(r, worker)
        received = {key: at for key, at in await quiet_sink.records() if key in published}
        latencies = [(at - published[key]) * 1000 for key, at in received.items()]
        quiet_stats = await quiet_sink.stats()
        seconds = done_at - stats["first"]
        return {
            "loud_rate": n / seconds,
            "loud_seconds": round(seconds, 3),
            "quiet": {
                "published": len(published),
                "received": len(received),
                "lost": len(published) - len(received),
                "invalid_signatures": quiet_stats["invalid"],
                "p50_ms": percentile(latencies, 50),
                "p99_ms": percentile(latencies, 99),
                "max_ms": max(latencies, default=0.0),
            },
        }
