"""15. Overload: open-loop load at 3x what `serve` sustains (#22, backpressure).

`dispatcher serve` as shipped (engine on, one subscription to the shared sink, so every
accepted event is delivered) on a database created for the run. First its sustained rate:
`POST /v1/events` flat out from 100 connections for 10 s (benchmarks/client.py). Then, open
loop, a request started every 1/(3 x that rate) s for 20 s, whatever the answers, over up to
2,000 connections: an overloaded process must answer quickly, accepting what it can (202) and
refusing the rest at once (503 `overloaded` with `Retry-After`), instead of queueing without
bound.

Figures: the accepted requests' p50/p99 latency (target p99 < 250 ms), how many were refused,
every 202's event delivered (the deliveries counted in the database), no refused request
stored (events stored during the run = 202s answered), and serve's peak RSS.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from benchmarks.common import (
    LOGS,
    Proc,
    Run,
    create_api_key,
    create_webhooks,
    create_workspace,
    fresh_database,
    percentile,
    run_client,
    start_serve,
    stop_process,
    wait_for_count,
)

NAME = "overload"
TITLE = "15. Overload (open loop at 3x the sustained rate)"
TARGET_TEXT = "accepted p99 < 250 ms; the rest 503 + Retry-After; every 202 delivered; RSS bounded"
P99_TARGET_MS = 250.0
FACTOR = 3.0


async def _events(db: Any) -> int:
    async with db.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM events"))


async def run(r: Run) -> dict[str, Any]:
    sink = await r.shared_sink()
    duration = 5.0 if r.quick else 20.0
    async with fresh_database(r, NAME) as (db, url):
        workspace = await create_workspace(db)
        await create_webhooks(db, workspace, [sink.url("/hook/overload")])
        key = await create_api_key(url, workspace, ["events:write"])
        serve, base = await start_serve(r, url, name="overload-serve")
        rss_peak = 0.0

        async def sample(proc: Proc) -> None:
            nonlocal rss_peak
            while True:
                rss_peak = max(rss_peak, proc.rss_mb())
                await asyncio.sleep(0.2)

        sampler = asyncio.create_task(sample(serve))
        try:
            common = ["--url", f"{base}/v1/events", "--kind", "events", "--key", key]
            sustained = await run_client(
                *common, "--id-prefix", "S", "--duration", str(duration / 2),
                "--concurrency", "100", within=duration + 120,
            )  # fmt: skip
            rate = sustained["ok_rps"]
            r.log(f"overload: serve sustains {rate:,.0f} publishes/s")
            before = await _events(db)
            LOGS.mkdir(parents=True, exist_ok=True)
            times_file = LOGS / f"{r.run_id}-overload-times.json"
            overloaded = await run_client(
                *common, "--id-prefix", "O", "--rate", str(rate * FACTOR),
                "--duration", str(duration), "--concurrency", "2000",
                "--times-file", str(times_file), within=duration + 180,
            )  # fmt: skip
            times = orjson.loads(times_file.read_bytes())
            times_file.unlink(missing_ok=True)
            stored = await _events(db) - before
            accepted = [t for t in times if t[3] == 202]
            refused = [t for t in times if t[3] == 503]
            latencies = [(t[2] - t[1]) * 1000 for t in accepted]
            refused_ms = [(t[2] - t[1]) * 1000 for t in refused]
            delivered_target = int(sustained["ok"]) + len(accepted)
            await wait_for_count(
                r, db, delivered_target, within=300, desc="overload: every 202 delivered",
                procs=[serve],
            )  # fmt: skip
        finally:
            sampler.cancel()
            await stop_process(r, serve)
    p99 = percentile(latencies, 99)
    met = p99 < P99_TARGET_MS and stored == len(accepted)
    result = {
        "sustained_rps": rate,
        "offered_rps": rate * FACTOR,
        "requests": len(times),
        "accepted": len(accepted),
        "refused_503": len(refused),
        "other": overloaded["by_status"],
        "accepted_p50_ms": percentile(latencies, 50),
        "accepted_p99_ms": p99,
        "refused_p99_ms": percentile(refused_ms, 99),
        "events_stored_during_overload": stored,
        "every_202_delivered": True,
        "serve_rss_peak_mb": round(rss_peak, 1),
        "client": overloaded,
    }
    return {
        "title": TITLE,
        "parameters": {"factor": FACTOR, "duration_s": duration, "connections": 2000},
        "measured": {"value": p99, "unit": "ms, accepted p99", **result},
        "baseline": {"name": "sustained rate, 100 connections flat out", "value": rate},
        "ratio": p99 / P99_TARGET_MS,
        "target": {"text": TARGET_TEXT},
        "met": met,
        "summary": {
            "measured": f"offered {rate * FACTOR:,.0f}/s: {len(accepted):,} accepted (p50 "
            f"{result['accepted_p50_ms']:,.1f} / p99 {p99:,.1f} ms), {len(refused):,} refused "
            f"503 (p99 {result['refused_p99_ms']:,.1f} ms); {stored:,} stored; every 202 "
            f"delivered; RSS peak {rss_peak:,.0f} MB",
            "baseline": f"sustained {rate:,.0f}/s",
            "ratio": f"accepted p99 = {p99 / P99_TARGET_MS:.2f} of 250 ms",
        },
    }
