"""4. Latency: events published at a steady 1,000/s for 30 s; publish → received p50/p95/p99.

Ten workspaces with one subscription each (so 1,000 deliveries/s, spread over ten endpoints
with the default per-endpoint limit), one `dispatcher worker`, and a sink in verify mode that
checks every signature and notes (data.id, receive time). The harness publishes each event
with `dispatcher_publish_event` in its own transaction (fsync on), on a steady schedule, and
notes the time just before the call; latency is receive time - that time (one machine, one
clock). Baseline: the same rate of plain HTTP POSTs from a bare aiohttp client to the same sink
(the floor any queue adds to). Ratios: p99 ÷ the 50 ms target, and p99 ÷ the baseline's p99.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import orjson
from tqdm import tqdm

from benchmarks.common import (
    EVENT_TYPE,
    REPO,
    CpuMeter,
    Run,
    Sink,
    create_webhooks,
    create_workspace,
    engine_statements,
    free_port,
    fresh_database,
    percentile,
    postmaster_pid,
    scrape_engine_metrics,
    start_sink,
    start_worker,
    stop_process,
    wait_until,
)
from dispatcher.domain.signing import new_secret
from dispatcher.store.database import Database

NAME = "latency"
TITLE = "4. Latency (publish → received)"
TARGET_MS = 50.0
RATE = 1000.0
LOW_RATE = 250.0
TENANTS = 10
PUBLISH = "SELECT dispatcher_publish_event($1, $2, jsonb_build_object('id', $3::text))"


async def http_floor(url: str, rate: float, duration: float) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.client",
        "--url",
        url,
        "--rate",
        str(rate),
        "--duration",
        str(duration),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=duration + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"client failed: {err.decode(errors='replace')[-2000:]}")
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


async def steady(
    r: Run,
    db: Database,
    sink: Sink,
    tenants: list[str],
    meter: CpuMeter,
    rate: float,
    duration: float,
    tag: str,
    metrics_port: int,
) -> dict[str, Any]:
    """Publish `rate` events/s for `duration` s; publish → received latencies at the sink."""
    total = int(rate * duration)
    await sink.reset()
    published: dict[str, float] = {}
    committed: dict[str, float] = {}
    call_ms: list[float] = []
    lag_ms: list[float] = []

    async def publish(i: int) -> None:
        key = f"{tag}{i}"
        before = time.time()  # before taking a connection: conservative
        published[key] = before
        async with db.acquire() as conn:
            await conn.execute(PUBLISH, tenants[i % len(tenants)], EVENT_TYPE, key)
        committed[key] = after = time.time()
        call_ms.append((after - before) * 1000)

    tasks: list[asyncio.Task[None]] = []
    statements_before = await scrape_engine_metrics(metrics_port)
    meter.start()
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.1
    with tqdm(total=total, desc=f"latency: {rate:g}/s", unit="ev", leave=False, position=1) as bar:
        for i in range(total):
            due = start + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            lag_ms.append(max(0.0, (loop.time() - due) * 1000))
            tasks.append(asyncio.create_task(publish(i)))
            if i % 200 == 0:
                bar.update(i - bar.n)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
        bar.update(total - bar.n)
    publish_seconds = loop.time() - start

    async def all_received() -> bool:
        return int((await sink.stats())["count"]) >= total

    await wait_until(all_received, within=120, interval=0.2, what="every delivery")
    cpu = meter.stop()
    statements = engine_statements(
        statements_before, await scrape_engine_metrics(metrics_port), cpu["wall_seconds"]
    )
    stats = await sink.stats()
    records = await sink.records()
    received = {key: at for key, at in records if key in published}
    latencies = [(at - published[key]) * 1000 for key, at in received.items()]
    # The engine's own share: from the commit (the event is visible) to its arrival.
    after_commit = [(at - committed[key]) * 1000 for key, at in received.items()]
    return {
        "rate_per_s": rate,
        "duration_s": duration,
        "events": total,
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies, default=0.0),
        "received": len(received),
        "lost": total - len(received),
        "duplicates": stats["duplicates"],
        "invalid_signatures": stats["invalid"],
        "publish_rate_achieved": total / publish_seconds,
        "commit_to_received_ms": {
            "p50": percentile(after_commit, 50),
            "p95": percentile(after_commit, 95),
            "p99": percentile(after_commit, 99),
        },
        "publish_call_ms": {
            "p50": percentile(call_ms, 50),
            "p95": percentile(call_ms, 95),
            "p99": percentile(call_ms, 99),
        },
        "schedule_lag_ms_p99": percentile(lag_ms, 99),
        "cpu": cpu,
        "engine_statements": statements,
    }


async def run(r: Run) -> dict[str, Any]:
    duration = 5.0 if r.quick else 30.0
    secret = new_secret()
    sink = await start_sink(r, "verify", secret=secret, record=True, name="sink-verify")
    try:
        async with fresh_database(r, NAME, pool_size=16) as (db, url):
            tenants = []
            for t in range(TENANTS):
                workspace = await create_workspace(db, f"tenant{t}")
                await create_webhooks(db, workspace, [sink.url(f"/t{t}")], secret=secret)
                tenants.append(workspace)
            port = free_port()
            worker = start_worker(r, url, name="latency-worker", metrics_port=port)
            meter = CpuMeter(
                {"harness": os.getpid(), "worker": worker.pid, "sink": sink.proc.pid},
                await postmaster_pid(db),
            )
            try:
                # Warm up: the worker is ready when a first event arrives.
                async with db.acquire() as conn:
                    await conn.execute(PUBLISH, tenants[0], EVENT_TYPE, "warmup")

                async def arrived() -> bool:
                    if not worker.alive():
                        raise RuntimeError(f"worker exited:\n{worker.tail()}")
                    return bool((await sink.stats())["count"])

                await wait_until(arrived, within=60, interval=0.1, what="the worker to start")
                await asyncio.sleep(1.0)
                m = await steady(r, db, sink, tenants, meter, RATE, duration, "L", port)
                # For information: a rate this machine sustains with room to spare.
                low_s = 3.0 if r.quick else 10.0
                low = await steady(r, db, sink, tenants, meter, LOW_RATE, low_s, "S", port)
            finally:
                await stop_process(r, worker)
        floor = await http_floor(sink.url("/mode/fast/floor"), RATE, 5.0 if r.quick else 10.0)
    finally:
        await stop_process(r, sink.proc)
    p50, p95, p99 = m["p50_ms"], m["p95_ms"], m["p99_ms"]
    measured = {"value": p99, "unit": "ms (p99)", **m, "at_low_rate": low}
    r.log(
        f"latency at {RATE:g}/s: p50 {p50:.1f} ms, p95 {p95:.1f} ms, p99 {p99:.1f} ms "
        f"(commit → received p99 {m['commit_to_received_ms']['p99']:.1f} ms; publish call "
        f"p99 {m['publish_call_ms']['p99']:.1f} ms; HTTP floor p99 {floor['p99_ms']:.1f} ms); "
        f"at {LOW_RATE:g}/s: p99 {low['p99_ms']:.1f} ms; bad signatures: "
        f"{m['invalid_signatures'] + low['invalid_signatures']}"
    )
    ok = m["lost"] == 0 and m["invalid_signatures"] == 0
    return {
        "title": TITLE,
        "parameters": {
            "rate_per_s": RATE,
            "duration_s": duration,
            "low_rate_per_s": LOW_RATE,
            "subscriptions": TENANTS,
            "workspaces": TENANTS,
            "sink": "verify (every signature checked with standardwebhooks)",
            "engine_settings": "defaults",
        },
        "measured": measured,
        "baseline": {
            "name": "bare aiohttp POSTs at the same rate to the same sink",
            "value": floor["p99_ms"],
            "unit": "ms (p99)",
            **floor,
        },
        "ratio": p99 / TARGET_MS,
        "ratio_to_baseline": p99 / floor["p99_ms"] if floor["p99_ms"] else None,
        "target": {"text": "p99 < 50 ms", "op": "<", "value": TARGET_MS},
        "met": p99 < TARGET_MS and ok,
        "notes": [
            f"at {RATE:g}/s the publish calls themselves took p50 "
            f"{m['publish_call_ms']['p50']:.0f} ms (achieved {m['publish_rate_achieved']:.0f}/s); "
            f"commit → received p99 {m['commit_to_received_ms']['p99']:.0f} ms; "
            f"at {LOW_RATE:g}/s: p50 {low['p50_ms']:.1f} / p99 {low['p99_ms']:.1f} ms"
        ],
        "summary": {
            "measured": f"p50 {p50:,.1f} / p95 {p95:,.1f} / p99 {p99:,.1f} ms "
            f"({m['events']:,} events, {m['lost']} lost, "
            f"{m['invalid_signatures']} bad signatures)",
            "baseline": f"bare HTTP p99 {floor['p99_ms']:.1f} ms",
            "ratio": f"p99 = {p99 / TARGET_MS:,.2f}x target; "
            f"{p99 / floor['p99_ms']:,.0f}x bare HTTP"
            if floor["p99_ms"]
            else f"{p99 / TARGET_MS:.2f}x target",
        },
    }
