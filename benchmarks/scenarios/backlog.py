"""10. Scale of backlog: the engine's claim cost and RSS with 10k, 1M and (if the disk allows)
10M due rows.

One database grows through the sizes (10k, then 1M, … due deliveries over 100 subscriptions),
published with `dispatcher_publish_event` (1,000 events, 100,000 deliveries per statement; no
engine runs meanwhile), then `VACUUM ANALYZE` of the whole database: what autovacuum does to
tables that grew, so that each size is measured in its steady state, not in the minutes after
a bulk load. (This is the one scenario where the harness vacuums or analyzes; the drains do
not. The JSON says so.)

At each size one `dispatcher worker` (default settings) is started and drains into the sink;
its own claim histogram on /metrics (`dispatcher_claim_duration_seconds`,
`dispatcher_claim_batch_size`) gives the claim cost as the engine runs it: the mean of its
claims 2 to 11 (the first warms the cache and is left out; ten claims of up to 500 rows take at
most half of the 10k backlog, so every size is measured nearly whole), and its VmRSS is sampled.
Only public surfaces are used (the SQL function, the worker process, its metrics), so the
scenario does not depend on how the engine stores its queue.

Ratio: the claim cost per claimed row at each size ÷ the same at 10k (flat means ≤ 1.5 here;
per row, because how many rows a claim takes depends on the slots free at that moment; the
mean per claim and its mean batch are reported beside it). Full runs
go to 10M when the disk has room for it; quick runs stop at 100k; `--backlog` picks the sizes.
The result says what was skipped and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from typing import Any

import aiohttp
from tqdm import tqdm

from benchmarks.common import (
    WORK,
    Run,
    create_webhooks,
    create_workspace,
    effective_settings,
    free_port,
    fresh_database,
    publish_events,
    scrape_engine_metrics,
    start_worker,
    stop_process,
)
from dispatcher.store.database import Database

NAME = "backlog"
TITLE = "10. Scale of backlog (claim cost, RSS)"
FLAT = 1.5
RSS_LIMIT_MB = 250.0
CLAIMS = 10  # measured per size, after the first
SUBSCRIPTIONS = 100
BYTES_PER_DELIVERY = 900  # history row, queue row, indexes, its share of the event (estimate)
TARGET_TEXT = "flat claim cost per row (≤ 1.5x of 10k), RSS < 250 MB"


def parse_size(text: str) -> int:
    text = text.strip().lower()
    factor = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * factor)


def label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1_000}k"


async def grow(r: Run, db: Database, workspace: str, have_events: int, want_events: int) -> float:
    started = time.perf_counter()
    await publish_events(
        r,
        db,
        workspace,
        want_events - have_events,
        first=have_events + 1,
        chunk=1000,
        fanout=SUBSCRIPTIONS,
        desc=f"backlog: load to {label(want_events * SUBSCRIPTIONS)}",
    )
    async with db.acquire() as conn:
        await conn.execute("VACUUM ANALYZE", timeout=3600)
    return time.perf_counter() - started


async def pending_count(db: Database) -> int:
    async with db.acquire() as conn:
        n: int = await conn.fetchval("SELECT count(*) FROM deliveries WHERE status = 'pending'")
    return n


async def engine_against_backlog(r: Run, url: str, deadline_s: float) -> dict[str, Any]:
    """A worker drains; its claims 2..CLAIMS+1 from /metrics, and its VmRSS."""
    port = free_port()
    worker = start_worker(r, url, name="backlog-worker", metrics_port=port)
    rss: list[float] = []
    first: dict[str, float] | None = None
    last: dict[str, float] = {}
    try:
        deadline = time.monotonic() + deadline_s
        with tqdm(total=CLAIMS, desc="backlog: claims", leave=False, position=1) as bar:
            while time.monotonic() < deadline:
                if not worker.alive():
                    raise RuntimeError(f"worker exited:\n{worker.tail()}")
                rss.append(worker.rss_mb())
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    last = await scrape_engine_metrics(port)
                claims = last.get("claim_duration_seconds_count", 0.0)
                if first is None and claims >= 1:
                    first = last
                elif first is not None:
                    done = claims - first["claim_duration_seconds_count"]
                    bar.update(int(min(done, CLAIMS)) - bar.n)
                    if done >= CLAIMS:
                        break
                await asyncio.sleep(0.05)
    finally:
        await stop_process(r, worker)
    if first is None:
        raise RuntimeError("the worker never claimed (or exposes no claim histogram)")

    def delta(name: str) -> float:
        assert first is not None
        return last.get(name, 0.0) - first.get(name, 0.0)

    claims = delta("claim_duration_seconds_count")
    if claims <= 0 or delta("claim_batch_size_sum") <= 0:
        raise RuntimeError("the worker claimed no rows after its first claim before the deadline")
    rows = delta("claim_batch_size_sum")
    seconds = delta("claim_duration_seconds_sum")
    return {
        "claims": int(claims),
        "claim_mean_ms": seconds / claims * 1000,
        "claim_mean_rows": rows / claims,
        "claim_us_per_row": seconds / rows * 1e6 if rows else None,
        "first_claim_ms": first.get("claim_duration_seconds_sum", 0.0)
        / max(first.get("claim_duration_seconds_count", 1.0), 1.0)
        * 1000,
        "rss_peak_mb": round(max(rss, default=0.0), 1),
        "rss_last_mb": round(rss[-1], 1) if rss else None,
    }


async def run(r: Run) -> dict[str, Any]:
    requested = r.options.get("backlog") or ("10k,100k" if r.quick else "10k,1m,10m")
    sizes = sorted({parse_size(s) for s in requested.split(",") if s.strip()})
    sink = await r.shared_sink()
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
            missing = size - await pending_count(db)
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
            pending = await pending_count(db)
            async with db.acquire() as conn:
                size_bytes = await conn.fetchval("SELECT pg_database_size(current_database())")
            engine = await engine_against_backlog(r, url, 120.0)
            point = {
                "size": size,
                "label": label(size),
                "due_rows": pending,
                "due_rows_after": await pending_count(db),
                "load_seconds": round(load_s, 1),
                "database_mb": round(size_bytes / 1e6),
                "claim_ms_mean": engine["claim_mean_ms"],
                "claim_us_per_row": engine["claim_us_per_row"],
                "engine": engine,
            }
            points.append(point)
            r.log(
                f"backlog {label(size)}: engine claim mean {engine['claim_mean_ms']:.1f} ms "
                f"({engine['claim_mean_rows']:.0f} rows, {engine['claim_us_per_row'] or 0:.0f} "
                f"µs/row), RSS peak {engine['rss_peak_mb']:.0f} MB "
                f"(loaded in {load_s:.0f} s)"
            )
        settings = effective_settings(url)
    if not points:
        raise RuntimeError("no backlog size could be measured")
    base = points[0]["claim_us_per_row"]
    for point in points:
        point["claim_ratio"] = point["claim_us_per_row"] / base
    worst = max(points, key=lambda p: p["claim_ratio"])
    rss_peak = max(p["engine"]["rss_peak_mb"] for p in points)
    largest = points[-1]
    met = worst["claim_ratio"] <= FLAT and rss_peak < RSS_LIMIT_MB and len(points) > 1
    return {
        "title": TITLE,
        "parameters": {
            "sizes": [p["size"] for p in points],
            "subscriptions": SUBSCRIPTIONS,
            "claims_measured_per_size": CLAIMS,
            "claim_cost": "the engine's own claim histogram (/metrics), claims 2..11",
            "engine_settings": settings,
            "harness_vacuum_analyze": "yes: VACUUM ANALYZE of the database after each load "
            "(what autovacuum does to tables that grew), so that every size is measured in "
            "its steady state, not in the minutes after a bulk load; the drain scenarios run "
            "none",
        },
        "measured": {
            "value": largest["claim_us_per_row"],
            "unit": f"µs of claim per claimed row at {largest['label']}",
            "points": points,
            "rss_peak_mb": rss_peak,
        },
        "baseline": {
            "name": f"claim cost per row at {points[0]['label']}",
            "value": base,
            "unit": "µs",
        },
        "ratio": largest["claim_ratio"],
        "target": {"text": TARGET_TEXT, "op": "<=", "value": FLAT},
        "met": met,
        "skipped": skipped,
        "notes": [
            *skipped,
            "VACUUM ANALYZE after each load (this scenario only; the drains run none)",
        ],
        "summary": {
            "measured": "claim "
            + " / ".join(
                f"{p['label']}: {p['claim_us_per_row']:.0f} µs/row "
                f"({p['claim_ms_mean']:.1f} ms for {p['engine']['claim_mean_rows']:.0f})"
                for p in points
            )
            + f"; RSS peak {rss_peak:.0f} MB",
            "baseline": f"claim at {points[0]['label']} {base:.0f} µs/row",
            "ratio": " / ".join(f"{p['claim_ratio']:.2f}" for p in points),
        },
    }
