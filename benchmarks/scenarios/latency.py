"""5. Latency: events published at a steady 1,000/s; publish → received p50/p95/p99.

Ten workspaces with one subscription each (so 1,000 deliveries/s, spread over ten endpoints
with the default per-endpoint limit), a sink in verify mode that checks every signature and
notes (data.id, receive time), and `dispatcher serve` with its engine on (the sidecar
default: one process serves the API and delivers). Events are published two ways, one after
the other, each for 30 s at 1,000/s on a steady schedule:

- **through the HTTP API, as users do**: `POST /v1/events` from a separate client process
  (benchmarks/client.py, paced, at most 100 connections, one API key per workspace made by
  `dispatcher keys create`); publish time = just before the request is issued;
- **through the SQL outbox**: `dispatcher_publish_event` in its own transaction (fsync on),
  from a pool of 16 connections in the harness; publish time = before a connection is taken.

Latency = receive time at the sink - publish time (one machine, one clock). The engine's own
share is reported beside it: from the moment the publisher got its answer (the 202, or the
committed call) to the receive time. For information: the SQL outbox again with the engine in
a separate `dispatcher worker` (serve stopped), and, in full runs, the HTTP API at 250/s.
Also (5c) the HTTP API at 1,000/s with every event to ONE webhook (the first workspace's key
alone): the most common set-up, one platform endpoint with the default `maxConcurrency`.
Baseline: the same rate of plain HTTP POSTs from a bare aiohttp client to the same sink (the
floor any queue adds to). Target: p99 < 50 ms at 1,000/s, both doors, and to one webhook.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import orjson
from tqdm import tqdm

from benchmarks.common import (
    EVENT_TYPE,
    LOGS,
    CpuMeter,
    Proc,
    Run,
    Sink,
    create_api_key,
    create_webhooks,
    create_workspace,
    effective_settings,
    engine_statements,
    free_port,
    fresh_database,
    percentile,
    postmaster_pid,
    run_client,
    scrape_engine_metrics,
    start_serve,
    start_sink,
    start_worker,
    stop_process,
    wait_until,
)
from dispatcher.domain.signing import new_secret
from dispatcher.store.database import Database

NAME = "latency"
TITLE = "5. Latency (publish → received)"
TARGET_MS = 50.0
TARGET_TEXT = "p99 < 50 ms at 1,000 events/s"
RATE = 1000.0
LOW_RATE = 250.0
TENANTS = 10
API_CLIENTS = 100
PUBLISH = "SELECT dispatcher_publish_event($1, $2, jsonb_build_object('id', $3::text))"


def spread(values: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values, default=0.0),
    }


async def collect(
    sink: Sink,
    published: dict[str, float],
    answered: dict[str, float],
    within: float,
) -> dict[str, Any]:
    """Wait (bounded) until the sink has every published event; the latencies. (The sink may
    also get events the publisher gave up on, a timed-out POST that the server committed
    after all: they are not counted, having no publish time.)"""
    received: dict[str, float] = {}

    async def all_received() -> bool:
        nonlocal received
        if int((await sink.stats())["count"]) < len(published):
            return False
        received = {key: at for key, at in await sink.records() if key in published}
        return len(received) >= len(published)

    complete = True
    try:
        await wait_until(all_received, within=within, interval=0.5, what="every delivery")
    except TimeoutError:
        complete = False
    stats = await sink.stats()
    received = {key: at for key, at in await sink.records() if key in published}
    latencies = [(at - published[key]) * 1000 for key, at in received.items()]
    after_answer = [(at - answered[key]) * 1000 for key, at in received.items() if key in answered]
    pub = spread(latencies)
    return {
        "p50_ms": pub["p50"],
        "p95_ms": pub["p95"],
        "p99_ms": pub["p99"],
        "max_ms": pub["max"],
        "events": len(published),
        "received": len(received),
        "lost": len(published) - len(received),
        "all_received_within_deadline": complete,
        "duplicates": stats["duplicates"],
        "invalid_signatures": stats["invalid"],
        # The engine's own share: from the publisher's answer (the event is committed and
        # visible) to the delivery's arrival.
        "answer_to_received_ms": spread(after_answer),
    }


async def sql_steady(
    db: Database,
    sink: Sink,
    tenants: list[str],
    meter: CpuMeter,
    rate: float,
    duration: float,
    tag: str,
    metrics_port: int,
) -> dict[str, Any]:
    """Publish `rate` events/s for `duration` s with dispatcher_publish_event."""
    total = int(rate * duration)
    await sink.reset()
    published: dict[str, float] = {}
    committed: dict[str, float] = {}
    call_ms: list[float] = []
    lag_ms: list[float] = []
    errors = 0

    async def publish(i: int) -> None:
        nonlocal errors
        key = f"{tag}{i}"
        before = time.time()  # before taking a connection: conservative
        try:
            async with db.acquire() as conn:
                await conn.execute(PUBLISH, tenants[i % len(tenants)], EVENT_TYPE, key)
        except Exception:
            errors += 1
            return
        published[key] = before
        committed[key] = after = time.time()
        call_ms.append((after - before) * 1000)

    tasks: list[asyncio.Task[None]] = []
    statements_before = await scrape_engine_metrics(metrics_port)
    meter.start()
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.1
    desc = f"latency: SQL {rate:g}/s"
    with tqdm(total=total, desc=desc, unit="ev", leave=False, position=1) as bar:
        for i in range(total):
            due = start + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            lag_ms.append(max(0.0, (loop.time() - due) * 1000))
            tasks.append(asyncio.create_task(publish(i)))
            if i % 200 == 0:
                bar.update(i - bar.n)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=180)
        bar.update(total - bar.n)
    publish_seconds = loop.time() - start
    result = await collect(sink, published, committed, within=120)
    cpu = meter.stop()
    statements = engine_statements(
        statements_before, await scrape_engine_metrics(metrics_port), cpu["wall_seconds"]
    )
    return {
        "door": "SQL outbox (dispatcher_publish_event, one transaction per event)",
        "rate_per_s": rate,
        "duration_s": duration,
        **result,
        "publish_errors": errors,
        "publish_rate_achieved": total / publish_seconds,
        "commit_to_received_ms": result["answer_to_received_ms"],
        "publish_call_ms": spread(call_ms),
        "schedule_lag_ms_p99": percentile(lag_ms, 99),
        "cpu": cpu,
        "engine_statements": statements,
    }


async def http_steady(
    r: Run,
    sink: Sink,
    base: str,
    keys: list[str],
    meter: CpuMeter,
    rate: float,
    duration: float,
    tag: str,
    metrics_port: int,
) -> dict[str, Any]:
    """POST /v1/events at `rate`/s for `duration` s from benchmarks/client.py."""
    await sink.reset()
    LOGS.mkdir(parents=True, exist_ok=True)
    times_file = LOGS / f"{r.run_id}-latency-{tag}-times.json"
    statements_before = await scrape_engine_metrics(metrics_port)
    meter.start()
    client = await run_client(
        "--url",
        f"{base}/v1/events",
        "--kind",
        "events",
        "--key",
        ",".join(keys),
        "--id-prefix",
        tag,
        "--rate",
        str(rate),
        "--duration",
        str(duration),
        "--concurrency",
        str(API_CLIENTS),
        "--times-file",
        str(times_file),
        within=duration + 180,
    )
    times = orjson.loads(times_file.read_bytes())
    times_file.unlink(missing_ok=True)
    published = {row[0]: row[1] for row in times if 200 <= row[3] < 300}
    answered = {row[0]: row[2] for row in times if 200 <= row[3] < 300}
    result = await collect(sink, published, answered, within=120)
    cpu = meter.stop()
    statements = engine_statements(
        statements_before, await scrape_engine_metrics(metrics_port), cpu["wall_seconds"]
    )
    return {
        "door": "HTTP API (POST /v1/events, 202 Accepted)",
        "rate_per_s": rate,
        "duration_s": duration,
        **result,
        "publish_errors": client["errors"],
        "publish_by_status": client["by_status"],
        "publish_rate_achieved": client["send_rate_achieved"],
        "response_to_received_ms": result["answer_to_received_ms"],
        "publish_call_ms": {
            "p50": client["p50_ms"],
            "p95": client["p95_ms"],
            "p99": client["p99_ms"],
            "max": client["max_ms"],
        },
        "schedule_lag_ms_p99": client["schedule_lag_ms_p99"],
        "client_cpu_us_per_request": client["cpu_us_per_request"],
        "cpu": cpu,
        "engine_statements": statements,
    }


async def first_arrival(db: Database, sink: Sink, tenant: str, engine: Proc) -> None:
    """Warm up: publish one event and wait until it arrives (the engine is running)."""
    await sink.reset()
    async with db.acquire() as conn:
        await conn.execute(PUBLISH, tenant, EVENT_TYPE, f"warmup{time.time()}")

    async def arrived() -> bool:
        if not engine.alive():
            raise RuntimeError(f"{engine.name} exited:\n{engine.tail()}")
        return bool((await sink.stats())["count"])

    await wait_until(arrived, within=60, interval=0.1, what="the engine to deliver")
    await asyncio.sleep(1.0)


def ok(m: dict[str, Any]) -> bool:
    return bool(
        m["p99_ms"] < TARGET_MS
        and m["lost"] == 0
        and m["invalid_signatures"] == 0
        and m["publish_errors"] == 0
    )


def measured_text(m: dict[str, Any], share: str) -> str:
    return (
        f"p50 {m['p50_ms']:,.1f} / p95 {m['p95_ms']:,.1f} / p99 {m['p99_ms']:,.1f} ms; "
        f"{share} p50 {m['answer_to_received_ms']['p50']:,.1f} / "
        f"p99 {m['answer_to_received_ms']['p99']:,.1f} ms ({m['events']:,} events, "
        f"{m['lost']} lost, {m['publish_errors']} not accepted, "
        f"{m['invalid_signatures']} bad signatures)"
    )


async def run(r: Run) -> dict[str, Any]:
    duration = 5.0 if r.quick else 30.0
    secret = new_secret()
    sink = await start_sink(r, "verify", secret=secret, record=True, name="sink-verify")
    low: dict[str, Any] | None = None
    try:
        async with fresh_database(r, NAME, pool_size=16) as (db, url):
            tenants = []
            for t in range(TENANTS):
                workspace = await create_workspace(db, f"tenant{t}")
                await create_webhooks(db, workspace, [sink.url(f"/t{t}")], secret=secret)
                tenants.append(workspace)
            keys = list(
                await asyncio.gather(*(create_api_key(url, ws, ["events:write"]) for ws in tenants))
            )
            postgres = await postmaster_pid(db)
            port = free_port()
            serve, base = await start_serve(r, url, name="latency-serve", metrics_port=port)
            try:
                meter = CpuMeter(
                    {"serve": serve.pid, "sink": sink.proc.pid, "harness": os.getpid()}, postgres
                )
                await first_arrival(db, sink, tenants[0], serve)
                http = await http_steady(r, sink, base, keys, meter, RATE, duration, "H", port)
                r.log(
                    f"latency: HTTP API at {RATE:g}/s: p50 {http['p50_ms']:.1f} / p99 "
                    f"{http['p99_ms']:.1f} ms (202 → received p99 "
                    f"{http['response_to_received_ms']['p99']:.1f} ms)"
                )
                sql = await sql_steady(db, sink, tenants, meter, RATE, duration, "S", port)
                r.log(
                    f"latency: SQL outbox at {RATE:g}/s: p50 {sql['p50_ms']:.1f} / p99 "
                    f"{sql['p99_ms']:.1f} ms (commit → received p99 "
                    f"{sql['commit_to_received_ms']['p99']:.1f} ms)"
                )
                if not r.quick:
                    low = await http_steady(r, sink, base, keys, meter, LOW_RATE, 10.0, "h", port)
            finally:
                await stop_process(r, serve)
            # For information: the same SQL load with the engine in a separate worker process.
            wport = free_port()
            worker = start_worker(r, url, name="latency-worker", metrics_port=wport)
            try:
                wmeter = CpuMeter(
                    {"worker": worker.pid, "sink": sink.proc.pid, "harness": os.getpid()}, postgres
                )
                await first_arrival(db, sink, tenants[0], worker)
                separate = await sql_steady(db, sink, tenants, wmeter, RATE, duration, "W", wport)
            finally:
                await stop_process(r, worker)
            # Last (a backlog it leaves must not delay the runs above): every event to ONE
            # webhook (one workspace's key), the most common set-up.
            serve, base = await start_serve(r, url, name="latency-serve-one", metrics_port=port)
            try:
                meter = CpuMeter(
                    {"serve": serve.pid, "sink": sink.proc.pid, "harness": os.getpid()}, postgres
                )
                await first_arrival(db, sink, tenants[0], serve)
                one = await http_steady(r, sink, base, keys[:1], meter, RATE, duration, "O", port)
            finally:
                await stop_process(r, serve)
            r.log(
                f"latency: HTTP API at {RATE:g}/s to ONE webhook: p50 {one['p50_ms']:.1f} / "
                f"p99 {one['p99_ms']:.1f} ms"
            )
            engine_settings = effective_settings(
                url, metrics_port=port, demo="off", log_level="info"
            )
        floor = await run_client(
            "--url",
            sink.url("/mode/fast/floor"),
            "--rate",
            str(RATE),
            "--duration",
            str(3.0 if r.quick else 10.0),
            "--concurrency",
            "1000",
            within=120,
        )
    finally:
        await stop_process(r, sink.proc)
    floor_p99 = floor["p99_ms"]
    r.log(
        f"latency: separate worker (SQL) p99 {separate['p99_ms']:.1f} ms; "
        f"bare HTTP floor p99 {floor_p99:.1f} ms"
    )

    def vs_floor(p99: float) -> str:
        return f"p99 = {p99 / TARGET_MS:,.2f}x target" + (
            f"; {p99 / floor_p99:,.0f}x bare HTTP" if floor_p99 else ""
        )

    rows = [
        {
            "label": "5. Latency via the HTTP API, 1,000/s (serve, engine on)",
            "measured": measured_text(http, "202 → received"),
            "baseline": f"bare HTTP p99 {floor_p99:.1f} ms",
            "ratio": vs_floor(http["p99_ms"]),
            "target": TARGET_TEXT,
            "met": ok(http),
        },
        {
            "label": "5c. Latency via the HTTP API, 1,000/s to ONE webhook (serve, engine on)",
            "measured": measured_text(one, "202 → received"),
            "baseline": f"bare HTTP p99 {floor_p99:.1f} ms",
            "ratio": vs_floor(one["p99_ms"]),
            "target": TARGET_TEXT,
            "met": ok(one),
        },
        {
            "label": "5a. Latency via the SQL outbox, 1,000/s (serve, engine on)",
            "measured": measured_text(sql, "commit → received"),
            "baseline": f"bare HTTP p99 {floor_p99:.1f} ms",
            "ratio": vs_floor(sql["p99_ms"]),
            "target": TARGET_TEXT,
            "met": ok(sql),
        },
        {
            "label": "5b. Latency via the SQL outbox, separate worker (for information)",
            "measured": measured_text(separate, "commit → received"),
            "baseline": f"bare HTTP p99 {floor_p99:.1f} ms",
            "ratio": vs_floor(separate["p99_ms"]),
            "target": TARGET_TEXT + " (for information)",
            "met": ok(separate),
            "info": True,
        },
    ]
    notes = [
        f"HTTP API at {RATE:g}/s: the POSTs took p50 {http['publish_call_ms']['p50']:.1f} / "
        f"p99 {http['publish_call_ms']['p99']:.1f} ms (sent at "
        f"{http['publish_rate_achieved']:.0f}/s); SQL outbox: the calls took p50 "
        f"{sql['publish_call_ms']['p50']:.1f} / p99 {sql['publish_call_ms']['p99']:.1f} ms "
        f"(achieved {sql['publish_rate_achieved']:.0f}/s)",
        "CPU (cores) during the HTTP run: "
        + ", ".join(f"{k} {v:.2f}" for k, v in http["cpu"]["cores_used"].items())
        + f"; machine {http['cpu']['machine_busy_fraction']:.0%} busy",
    ]
    if low is not None:
        notes.append(
            f"HTTP API at {LOW_RATE:g}/s: p50 {low['p50_ms']:.1f} / p99 {low['p99_ms']:.1f} ms"
        )
    met = ok(http) and ok(sql) and ok(one)
    return {
        "title": TITLE,
        "parameters": {
            "rate_per_s": RATE,
            "duration_s": duration,
            "low_rate_per_s": LOW_RATE if low is not None else None,
            "subscriptions": TENANTS,
            "workspaces": TENANTS,
            "api_client_connections": API_CLIENTS,
            "engine": "dispatcher serve (engine on, the sidecar default); "
            "5b: dispatcher worker alone",
            "sink": "verify (every signature checked with standardwebhooks)",
            "engine_settings": engine_settings,
        },
        "measured": {
            "value": http["p99_ms"],
            "unit": "ms (p99, HTTP API door)",
            **http,
            "sql_outbox": sql,
            "one_webhook": one,
            "separate_worker": separate,
            "at_low_rate": low,
        },
        "baseline": {
            "name": "bare aiohttp POSTs at the same rate to the same sink",
            "value": floor_p99,
            "unit": "ms (p99)",
            **floor,
        },
        "ratio": http["p99_ms"] / TARGET_MS,
        "ratio_sql": sql["p99_ms"] / TARGET_MS,
        "ratio_to_baseline": http["p99_ms"] / floor_p99 if floor_p99 else None,
        "target": {"text": TARGET_TEXT, "op": "<", "value": TARGET_MS},
        "met": met,
        "rows": rows,
        "notes": notes,
        "summary": {
            "measured": rows[0]["measured"],
            "baseline": rows[0]["baseline"],
            "ratio": rows[0]["ratio"],
        },
    }
