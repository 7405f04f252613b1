"""12. Idle: what 8 idle `dispatcher serve` processes on one database cost, and how fast an
event published through the SQL outbox (which sends no NOTIFY) still reaches its receiver.

On a database created for the run, 8 `dispatcher serve` processes (engine on, shipped
defaults, distinct loopback ports) and one webhook to a recording sink. After a warm-up,
for MEASURE_S seconds: each serve process's CPU, from /proc/PID/stat, and the CPU of every
Postgres backend of the database (pids from pg_stat_activity, the harness's own idle
connection left out; sampled every second, so a backend that comes or goes counts for its
part), from /proc/PID/stat too: the Postgres runs on this machine. Reported per process:
own CPU and Postgres CPU (all backends / 8), in % of a core. Then PUBLISH_RATE events a
second for PUBLISH_S seconds through `dispatcher_publish_event`, each in its own
transaction, and for each the time from its commit (as the harness saw it return) to the
sink receiving it: p50/p99. Targets (issue #22, part 6): own ≤ 1 %, Postgres ≤ 0.5 % of a
core per process, outbox → received p99 < 100 ms.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    CLK_TCK,
    Run,
    create_webhooks,
    create_workspace,
    effective_settings,
    fresh_database,
    percentile,
    start_serve,
    start_sink,
    stop_process,
    wait_until,
)

NAME = "idle"
TITLE = "12. Idle (8 idle serve processes on one database; SQL outbox latency)"
PROCESSES = 8
TARGET_OWN_PCT = 1.0
TARGET_PG_PCT = 0.5
TARGET_P99_MS = 100.0
TARGET_TEXT = (
    f"idle serve ≤ {TARGET_OWN_PCT:g} % own, ≤ {TARGET_PG_PCT:g} % Postgres of a core per "
    f"process ({PROCESSES} processes); outbox → received p99 < {TARGET_P99_MS:g} ms"
)
PUBLISH_RATE = 20.0


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process, from /proc/PID/stat; None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def measure(db: Any, serve_pids: list[int], seconds: float) -> dict[str, Any]:
    """CPU seconds of each serve process and of the database's backends over `seconds`."""
    async with db.acquire() as conn:
        own_backend: int = await conn.fetchval("SELECT pg_backend_pid()")

        async def backends() -> list[int]:
            rows = await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> $1",
                own_backend,
            )
            return [int(row["pid"]) for row in rows]

        first = {pid: cpu_seconds(pid) or 0.0 for pid in serve_pids}
        pg_first: dict[int, float] = {}
        pg_last: dict[int, float] = {}
        for pid in await backends():
            value = cpu_seconds(pid)
            if value is not None:
                pg_first[pid] = pg_last[pid] = value
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            await asyncio.sleep(1.0)
            for pid in await backends():
                value = cpu_seconds(pid)
                if value is not None:
                    pg_first.setdefault(pid, 0.0)  # a backend that came meanwhile
                    pg_last[pid] = value
        wall = time.monotonic() - started
        last = {pid: cpu_seconds(pid) or 0.0 for pid in serve_pids}
    own = [(last[pid] - first[pid]) / wall * 100 for pid in serve_pids]
    pg_total = sum(pg_last[pid] - pg_first.get(pid, 0.0) for pid in pg_last)
    return {
        "wall_seconds": round(wall, 1),
        "own_pct_per_process": [round(x, 3) for x in own],
        "own_pct_mean": round(sum(own) / len(own), 3),
        "own_pct_max": round(max(own), 3),
        "postgres_pct_per_process": round(pg_total / wall * 100 / len(serve_pids), 3),
        "postgres_backends": len(pg_last),
    }


async def publish_paced(db: Any, workspace: str, n: int, rate: float) -> dict[str, float]:
    """n events through the SQL outbox, one transaction each, `rate` a second; the commit
    time of each (by data.id)."""
    committed: dict[str, float] = {}
    start = time.monotonic()
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the publisher, not synchronisation
        data_id = f"idle-{i}"
        async with db.transaction() as conn:
            await conn.execute(
                "SELECT dispatcher_publish_event($1, 'contact.updated', "
                "jsonb_build_object('id', $2::text))",
                workspace,
                data_id,
            )
        committed[data_id] = time.time()
    return committed


async def run(r: Run) -> dict[str, Any]:
    warmup = 5.0 if r.quick else 15.0
    seconds = 20.0 if r.quick else 60.0
    publish_s = 10.0 if r.quick else 20.0
    sink = await start_sink(r, "fast", record=True, name="sink-idle")
    serves = []
    try:
        async with fresh_database(r, NAME, pool_size=2) as (db, url):
            workspace = await create_workspace(db)
            await create_webhooks(db, workspace, [sink.url("/idle")])
            for i in range(PROCESSES):
                proc, _ = await start_serve(r, url, name=f"idle-serve{i}", log_level="warning")
                serves.append(proc)
            r.log(f"idle: {PROCESSES} serve processes ready; warm-up {warmup:g} s")
            await asyncio.sleep(warmup)  # a warm-up, not synchronisation
            cpu = await measure(db, [p.pid for p in serves], seconds)
            r.log(
                f"idle: own {cpu['own_pct_mean']:.2f} % (max {cpu['own_pct_max']:.2f} %), "
                f"Postgres {cpu['postgres_pct_per_process']:.2f} % of a core per process"
            )
            n = int(PUBLISH_RATE * publish_s)
            committed = await publish_paced(db, workspace, n, PUBLISH_RATE)

            async def all_received() -> bool:
                return int((await sink.stats())["count"]) >= n

            await wait_until(all_received, within=60, interval=0.1, what="every outbox event")
            records = await sink.records()
            settings = effective_settings(url)
    finally:
        for proc in serves:
            await stop_process(r, proc)
        await stop_process(r, sink.proc)
    latencies = sorted(
        (at - committed[data_id]) * 1000 for data_id, at in records if data_id in committed
    )
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    r.log(f"idle: SQL outbox → received p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(latencies)})")
    met = (
        cpu["own_pct_mean"] <= TARGET_OWN_PCT
        and cpu["postgres_pct_per_process"] <= TARGET_PG_PCT
        and p99 < TARGET_P99_MS
    )
    return {
        "title": TITLE,
        "processes": PROCESSES,
        "warmup_seconds": warmup,
        "cpu": cpu,
        "outbox": {
            "rate_per_s": PUBLISH_RATE,
            "events": len(latencies),
            "p50_ms": round(p50, 1),
            "p99_ms": round(p99, 1),
            "max_ms": round(latencies[-1], 1) if latencies else None,
        },
        "settings": settings,
        "target": {
            "text": TARGET_TEXT,
            "own_pct": TARGET_OWN_PCT,
            "postgres_pct": TARGET_PG_PCT,
            "p99_ms": TARGET_P99_MS,
        },
        "met": met,
        "summary": {
            "measured": (
                f"own {cpu['own_pct_mean']:.2f} %, Postgres "
                f"{cpu['postgres_pct_per_process']:.2f} % per process; outbox p99 {p99:.0f} ms"
            ),
            "baseline": "—",
            "ratio": "—",
        },
    }
