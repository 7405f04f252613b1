"""7. Scale of backlog: claim latency and RSS with 10k, 1M and (if the disk allows) 10M due rows.

One database grows through the sizes (10k, then 1M, … due deliveries over 100 subscriptions,
written set-based: the same rows `dispatcher_publish_event` makes, without a function call per
event), followed by VACUUM ANALYZE (what autovacuum does to a table that grew). At each size:

- claim cost: dispatcher's own claim statement (`dispatcher.store.queue.claim`, batch 500, as
  the engine runs it) timed 20 times from the harness, each claim's leases handed back after,
  so every claim sees the whole backlog; median and p95;
- the engine against it: one `dispatcher worker` drains for a few seconds into the sink, and
  its VmRSS is sampled (peak) along with its own claim-duration histogram (`/metrics`).

Ratio: the claim median at each size ÷ the claim median at 10k (flat means ≤ 1.5 here).
Full runs go to 10M when the disk has room for it (~7 GB, about ten minutes to write here);
quick runs stop at 100k; `--backlog` picks the sizes. The result says what was skipped and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from tqdm import tqdm

from benchmarks.common import (
    WORK,
    Run,
    create_webhooks,
    create_workspace,
    free_port,
    fresh_database,
    percentile,
    scrape_engine_metrics,
    start_worker,
    stop_process,
)
from dispatcher.store import queue
from dispatcher.store.database import Database

NAME = "backlog"
TITLE = "7. Scale of backlog (claim cost, RSS)"
FLAT = 1.5
RSS_LIMIT_MB = 250.0
CLAIMS = 20
SUBSCRIPTIONS = 100
BYTES_PER_DELIVERY = 700  # table + 5 indexes + its share of the event, measured: ~0.6 KB

LOAD = """
WITH ev AS (
    INSERT INTO events (id, workspace_id, type, source, payload, created_at)
    SELECT x.id, $1, 'contact.updated', 'outbox',
           jsonb_build_object(
               'id', x.id, 'type', 'contact.updated', 'apiVersion', '2026-11-01',
               'createdAt', to_char(x.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               'data', jsonb_build_object('id', 'CT' || x.g))::text,
           x.at
    FROM (SELECT dispatcher_new_id('EV') AS id, g, clock_timestamp() AS at
          FROM generate_series($2::int, $3::int) g) x
    RETURNING id, workspace_id, type, created_at
)
INSERT INTO deliveries
    (id, workspace_id, webhook_id, event_id, event_type, created_at, next_attempt_at)
SELECT dispatcher_new_id('WD'), ev.workspace_id, w.id, ev.id, ev.type, ev.created_at,
       ev.created_at
FROM ev JOIN webhooks w ON w.workspace_id = ev.workspace_id
"""


def parse_size(text: str) -> int:
    text = text.strip().lower()
    factor = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * factor)


def label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1_000}k"


async def grow(r: Run, db: Database, workspace: str, have_events: int, want_events: int) -> float:
    started = time.perf_counter()
    chunk = 1000  # events per statement: 100k deliveries
    with tqdm(
        total=(want_events - have_events) * SUBSCRIPTIONS,
        desc=f"backlog: load to {label(want_events * SUBSCRIPTIONS)}",
        unit="dlv",
        unit_scale=True,
        leave=False,
        position=1,
    ) as bar:
        for low in range(have_events + 1, want_events + 1, chunk):
            high = min(low + chunk - 1, want_events)
            async with db.acquire() as conn:
                await conn.execute(LOAD, workspace, low, high, timeout=1800)
            bar.update((high - low + 1) * SUBSCRIPTIONS)
    async with db.acquire() as conn:
        await conn.execute("VACUUM ANALYZE deliveries", timeout=3600)
        await conn.execute("VACUUM ANALYZE events", timeout=3600)
    return time.perf_counter() - started


async def time_claims(db: Database) -> list[float]:
    owner = "bench-claim-probe"
    times = []
    for i in range(CLAIMS + 1):
        now = datetime.now(UTC)
        started = time.perf_counter()
        rows = await queue.claim(
            db,
            owner=owner,
            now=now,
            limit=500,
            skip_webhooks=[],
            default_concurrency=10,
            lease=timedelta(seconds=45),
        )
        elapsed = time.perf_counter() - started
        if i:  # the first one warms the cache
            times.append(elapsed)
        if len(rows) != 500:
            raise RuntimeError(f"claim returned {len(rows)} rows, expected 500")
        async with db.acquire() as conn:
            await conn.execute(
                "UPDATE deliveries SET lease_owner = NULL, next_attempt_at = created_at "
                "WHERE lease_owner = $1 AND status = 'pending'",
                owner,
            )
    return times


async def engine_against_backlog(r: Run, url: str, seconds: float) -> dict[str, Any]:
    port = free_port()
    worker = start_worker(r, url, name="backlog-worker", metrics_port=port)
    rss: list[float] = []
    try:
        deadline = time.monotonic() + seconds + 30
        started = None
        with tqdm(total=seconds, desc="backlog: engine", unit="s", leave=False, position=1) as bar:
            while time.monotonic() < deadline:
                if not worker.alive():
                    raise RuntimeError(f"worker exited:\n{worker.tail()}")
                rss.append(worker.rss_mb())
                if started is None:
                    with contextlib.suppress(aiohttp.ClientError, OSError):
                        if (await scrape_engine_metrics(port)).get("claim_batch_size_sum", 0) > 0:
                            started = time.monotonic()
                elif time.monotonic() - started >= seconds:
                    break
                else:
                    bar.update(round(time.monotonic() - started, 1) - bar.n)
                await asyncio.sleep(0.2)
        if started is None:
            raise RuntimeError("the worker never claimed")
        metrics = await scrape_engine_metrics(port)
    finally:
        await stop_process(r, worker)
    count = metrics.get("claim_duration_seconds_count", 0.0)
    return {
        "rss_peak_mb": round(max(rss, default=0.0), 1),
        "rss_last_mb": round(rss[-1], 1) if rss else None,
        "claims": int(count),
        "claim_mean_ms": metrics.get("claim_duration_seconds_sum", 0.0) / count * 1000
        if count
        else None,
        "seconds": seconds,
    }


async def run(r: Run) -> dict[str, Any]:
    requested = r.options.get("backlog") or ("10k,100k" if r.quick else "10k,1m,10m")
    sizes = sorted({parse_size(s) for s in requested.split(",") if s.strip()})
    sink = await r.shared_sink()
    engine_seconds = 5.0 if r.quick else 10.0
    points: list[dict[str, Any]] = []
    skipped: list[str] = []
    if not r.quick and "10m" not in requested.lower():
        skipped.append(f"10M: not requested (--backlog {requested})")
    async with fresh_database(r, NAME) as (db, url):
        workspace = await create_workspace(db)
        urls = [sink.url(f"/backlog/{i}") for i in range(SUBSCRIPTIONS)]
        await create_webhooks(db, workspace, urls)
        events = 0
        for size in sizes:
            async with db.acquire() as conn:
                pending = await conn.fetchval(
                    "SELECT count(*) FROM deliveries WHERE status = 'pending'"
                )
            missing = size - pending
            need_bytes = missing * BYTES_PER_DELIVERY * 1.5
            free = shutil.disk_usage(WORK).free
            if need_bytes > free:
                skipped.append(
                    f"{label(size)}: needs ~{need_bytes / 1e9:.0f} GB, {free / 1e9:.0f} free"
                )
                continue
            load_s = 0.0
            if missing > 0:
                want = events + -(-missing // SUBSCRIPTIONS)
                load_s = await grow(r, db, workspace, events, want)
                events = want
            async with db.acquire() as conn:
                pending = await conn.fetchval(
                    "SELECT count(*) FROM deliveries WHERE status = 'pending'"
                )
                size_bytes = await conn.fetchval("SELECT pg_database_size(current_database())")
                started = time.perf_counter()
                await queue.due_summary(db, datetime.now(UTC))
                summary_s = time.perf_counter() - started
            claims = await time_claims(db)
            engine = await engine_against_backlog(r, url, engine_seconds)
            point = {
                "size": size,
                "label": label(size),
                "due_rows": pending,
                "load_seconds": round(load_s, 1),
                "database_mb": round(size_bytes / 1e6),
                "claim_ms_p50": percentile(claims, 50) * 1000,
                "claim_ms_p95": percentile(claims, 95) * 1000,
                "claim_ms_all": [round(x * 1000, 2) for x in claims],
                "monitor_due_summary_ms": summary_s * 1000,
                "engine": engine,
            }
            points.append(point)
            r.log(
                f"backlog {label(size)}: claim p50 {point['claim_ms_p50']:.1f} ms, "
                f"engine claim mean {engine['claim_mean_ms'] or 0:.1f} ms, "
                f"RSS peak {engine['rss_peak_mb']:.0f} MB (loaded in {load_s:.0f} s)"
            )
    if not points:
        raise RuntimeError("no backlog size could be measured")
    base = points[0]["claim_ms_p50"]
    for point in points:
        point["claim_ratio"] = point["claim_ms_p50"] / base
    worst = max(points, key=lambda p: p["claim_ratio"])
    rss_peak = max(p["engine"]["rss_peak_mb"] for p in points)
    largest = points[-1]
    met = worst["claim_ratio"] <= FLAT and rss_peak < RSS_LIMIT_MB and len(points) > 1
    return {
        "title": TITLE,
        "parameters": {
            "sizes": [p["size"] for p in points],
            "claim_batch": 500,
            "claims_timed_per_size": CLAIMS,
            "engine_seconds_per_size": engine_seconds,
        },
        "measured": {
            "value": largest["claim_ms_p50"],
            "unit": f"ms claim p50 at {largest['label']}",
            "points": points,
            "rss_peak_mb": rss_peak,
        },
        "baseline": {"name": f"claim p50 at {points[0]['label']}", "value": base, "unit": "ms"},
        "ratio": largest["claim_ratio"],
        "target": {
            "text": f"flat claim cost (≤ {FLAT}x of 10k), RSS < 250 MB",
            "op": "<=",
            "value": FLAT,
        },
        "met": met,
        "skipped": skipped,
        "notes": skipped,
        "summary": {
            "measured": "claim p50 "
            + " / ".join(f"{p['label']}: {p['claim_ms_p50']:.1f} ms" for p in points)
            + f"; RSS peak {rss_peak:.0f} MB",
            "baseline": f"claim p50 at {points[0]['label']} {base:.1f} ms",
            "ratio": " / ".join(f"{p['claim_ratio']:.2f}" for p in points),
        },
    }
