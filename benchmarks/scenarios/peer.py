"""3. Peer baseline: the same drain done the obvious way with PgQueuer and aiohttp, at its best.

Same N as scenario 2, same 100 endpoints on the same sink, same machine, same run. A peer is
measured at its best, so PgQueuer is swept over its two knobs in this run, 8 points: batch
size (`QueueManager.run(batch_size=...)`) 10, 50, 100, 500 x the entrypoint's concurrency limit
none (PgQueuer's default) and 100. Each point gets a database created for it with PgQueuer's
own schema (`install`), N jobs enqueued, and one consumer process
(benchmarks/peer_pgqueuer.py) started right after, timed the same way as dispatcher's drain:
from the first request the sink receives until the queue table is empty. As for dispatcher,
the harness runs no ANALYZE/VACUUM on either side. Every point is reported; the fastest is the
baseline. Ratio: dispatcher's fresh drain (scenario 2) ÷ PgQueuer's best point. Target ≥ 1.5.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from tqdm import tqdm

from benchmarks.common import (
    WORK,
    CpuMeter,
    Run,
    Sink,
    create_database,
    drop_database,
    postmaster_pid,
    run_json,
    start_process,
    stop_process,
    wait_until,
)
from dispatcher.domain.signing import new_secret
from dispatcher.store.database import Database

NAME = "peer"
TITLE = "3. Peer baseline (PgQueuer, best of 8)"
TARGET = 1.5
TARGET_TEXT = "≥ 1.5x PgQueuer's best point"
BATCH_SIZES = (10, 50, 100, 500)
CONCURRENCY_LIMITS = (0, 100)  # 0: no limit (PgQueuer's default)


def label(point: dict[str, Any]) -> str:
    limit = point["concurrency_limit"] or "none"
    return f"batch {point['batch_size']}, limit {limit}"


async def helper(*args: str, within: float = 900) -> dict[str, Any]:
    result: dict[str, Any] = await run_json(
        ["-m", "benchmarks.peer_pgqueuer", *args], within=within, what=f"peer_pgqueuer {args[0]}"
    )
    return result


async def pgqueuer_drain(
    r: Run, sink: Sink, n: int, batch_size: int, concurrency_limit: int
) -> dict[str, Any]:
    """One point: a new database, PgQueuer's schema, n jobs, one consumer, timed."""
    events = max(1, n // 100)
    n = events * 100
    tag = f"b{batch_size}_c{concurrency_limit or 'none'}"
    name = r.db_name(f"peer_{tag}")
    dsn = await create_database(r, name)
    db = await Database.open(dsn, min_size=1, max_size=2)
    try:
        await helper("install", "--dsn", dsn)
        endpoints = [{"url": sink.url(f"/peer/{i}"), "secret": new_secret()} for i in range(100)]
        path = WORK / "logs" / f"{r.run_id}-peer-endpoints.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(endpoints))
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        enqueued = await helper(
            "enqueue", "--dsn", dsn, "--events", str(events), "--endpoints-file", str(path)
        )
        enqueue_s = loop.time() - t0
        path.unlink(missing_ok=True)
        if enqueued["enqueued"] != n:
            raise RuntimeError(f"enqueued {enqueued['enqueued']} of {n}")
        await sink.reset()
        args = ["consume", "--dsn", dsn, "--concurrency", str(concurrency_limit)]
        args += ["--batch-size", str(batch_size), "--driver", "connection"]
        proc = start_process(r, f"peer-{tag}", ["-m", "benchmarks.peer_pgqueuer", *args])
        try:
            meter = CpuMeter({"peer": proc.pid, "sink": sink.proc.pid}, await postmaster_pid(db))

            async def delivering() -> bool:
                if not proc.alive():
                    raise RuntimeError(f"peer exited early:\n{proc.tail()}")
                return bool((await sink.stats())["count"])

            # CPU from the first delivery on, as for dispatcher (not the start-up).
            await wait_until(delivering, within=60, interval=0.05, what="the first PgQueuer job")
            meter.start()
            with tqdm(
                total=n, desc=f"peer ({tag})", unit="job", leave=False, unit_scale=True, position=1
            ) as bar:

                async def empty() -> bool:
                    async with db.acquire() as conn:
                        left: int = await conn.fetchval("SELECT count(*) FROM pgqueuer")
                    bar.update(n - left - bar.n)
                    if left and not proc.alive():
                        raise RuntimeError(f"peer exited early:\n{proc.tail()}")
                    return left == 0

                done_at = await wait_until(
                    empty, within=max(180.0, n / 100), interval=0.2, what="PgQueuer drain"
                )
            cpu = meter.stop()
            stats = await sink.stats()
        finally:
            await stop_process(r, proc)
        seconds = done_at - stats["first"]
        return {
            "batch_size": batch_size,
            "concurrency_limit": concurrency_limit,
            "jobs": n,
            "seconds": round(seconds, 3),
            "rate": n / seconds,
            "sink_count": stats["count"],
            "duplicates": stats["duplicates"],
            "sink_rate": (stats["count"] - 1) / (stats["last"] - stats["first"])
            if stats["last"] > stats["first"]
            else None,
            "enqueue_seconds": round(enqueue_s, 3),
            "cpu": cpu,
            "cpu_us_per_job": {k: round(v / n * 1e6) for k, v in cpu["cpu_seconds"].items()},
        }
    finally:
        await db.close()
        if not r.options.get("keep_databases"):
            await drop_database(r, name)


async def run(r: Run) -> dict[str, Any]:
    drain = await r.require("drain")
    if drain.get("error"):
        raise RuntimeError("scenario 2 (drain) failed; nothing to compare with")
    sink = await r.shared_sink()
    n = drain["measured"]["deliveries"]
    points: list[dict[str, Any]] = []
    for limit in CONCURRENCY_LIMITS:
        for batch in BATCH_SIZES:
            point: dict[str, Any] = {"batch_size": batch, "concurrency_limit": limit}
            try:
                point = await pgqueuer_drain(r, sink, n, batch, limit)
                r.log(f"peer: PgQueuer {label(point)}: {point['rate']:,.0f} jobs/s")
            except Exception as exc:  # one point failing does not hide the others
                point["error"] = f"{type(exc).__name__}: {exc}"
                r.log(f"peer: PgQueuer {label(point)} FAILED: {exc!r}")
            points.append(point)
    measured = [p for p in points if "rate" in p]
    if not measured:
        raise RuntimeError("no PgQueuer point could be measured")
    best = max(measured, key=lambda p: p["rate"])
    value = drain["measured"]["value"]
    baseline = best["rate"]
    share = value / baseline
    r.log(f"peer: dispatcher {value:,.0f} / PgQueuer best ({label(best)}) {baseline:,.0f}")

    def sweep_text(limit: int) -> str:
        return " / ".join(
            f"{p['rate']:,.0f}" if "rate" in p else "error"
            for p in points
            if p["concurrency_limit"] == limit
        )

    rows = [
        {
            "label": "3. Peer: dispatcher ÷ PgQueuer's best point",
            "measured": f"dispatcher {value:,.0f} deliveries/s (fresh drain)",
            "baseline": f"PgQueuer {baseline:,.0f} jobs/s ({label(best)}; N={n:,})",
            "ratio": f"{share:.2f}x",
            "target": TARGET_TEXT,
            "met": share >= TARGET,
        },
        {
            "label": "3a. PgQueuer sweep, jobs/s (for information)",
            "measured": "batch "
            + "/".join(str(b) for b in BATCH_SIZES)
            + ": no limit "
            + sweep_text(0)
            + "; limit 100 "
            + sweep_text(100),
            "baseline": "—",
            "ratio": "—",
            "target": "every point reported",
            "met": None,
            "info": True,
        },
    ]
    drain_cpu = drain["measured"]["cpu_us_per_delivery"]
    return {
        "title": TITLE,
        "parameters": {
            "jobs": n,
            "pgqueuer": __import__("pgqueuer").__version__,
            "batch_sizes": list(BATCH_SIZES),
            "concurrency_limits": ["none" if c == 0 else c for c in CONCURRENCY_LIMITS],
            "driver": "one asyncpg connection (AsyncpgDriver), as in PgQueuer's README",
            "http": "one aiohttp ClientSession, default pool (100 connections)",
            "database": "created for each point; no ANALYZE/VACUUM by the harness",
            "what_it_does": "one job per delivery; sign + POST with one aiohttp session; "
            "PgQueuer logs completion in batches (no delivery row, no per-endpoint limit)",
        },
        "measured": {"value": value, "unit": "deliveries/s", "name": "dispatcher (scenario 2)"},
        "baseline": {
            "name": f"PgQueuer + aiohttp, best point ({label(best)})",
            "value": baseline,
            "unit": "jobs/s",
            **best,
        },
        "points": points,
        "ratio": share,
        "target": {"text": TARGET_TEXT, "op": ">=", "value": TARGET},
        "met": share >= TARGET,
        "rows": rows,
        "notes": [
            "CPU per delivery (µs): dispatcher "
            + ", ".join(f"{k} {v}" for k, v in drain_cpu.items())
            + f"; PgQueuer at its best point ({label(best)}) "
            + ", ".join(f"{k} {v}" for k, v in best["cpu_us_per_job"].items())
        ]
        + [f"PgQueuer {label(p)}: {p['error']}" for p in points if "error" in p],
        "summary": {
            "measured": rows[0]["measured"],
            "baseline": rows[0]["baseline"],
            "ratio": rows[0]["ratio"],
        },
    }
