"""2. Drain throughput: N pending deliveries over 100 subscriptions, drained end to end.

N/100 events are published with `dispatcher_publish_event` (each fans out to the 100
subscriptions), then one `python -m dispatcher worker` (default settings, fsync on) is started
and timed from the first request the sink receives to the moment the database shows every
delivery `delivered` (claim → sign → POST → record). Ratio: deliveries/s ÷ the ceiling's
requests/s, same sink, same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from typing import Any

from benchmarks.common import (
    CpuMeter,
    Proc,
    Run,
    Sink,
    create_webhooks,
    create_workspace,
    engine_statements,
    free_port,
    fresh_database,
    postmaster_pid,
    publish_events,
    scrape_engine_metrics,
    start_process,
    start_worker,
    stop_process,
    wait_for_count,
    wait_until,
)

NAME = "drain"
TITLE = "2. Drain throughput"
TARGET = 0.75
DEPENDS = ("ceiling",)

# The engine's settings for every throughput run: the product's defaults, stated explicitly.
ENGINE_DEFAULTS: dict[str, Any] = {
    "max_in_flight": 1000,
    "claim_batch_size": 500,
    "max_concurrency_per_webhook": 10,
    "pool_size": 10,
}


async def dispatcher_drain(
    r: Run,
    sink: Sink,
    n: int,
    *,
    scenario: str,
    subscriptions: int = 100,
    workers: int = 1,
    hang_sink: Sink | None = None,
    hanging: int = 0,
    settings: dict[str, Any] | None = None,
    profile_path: str | None = None,
) -> dict[str, Any]:
    """Publish n deliveries over `subscriptions` webhooks, drain them with `workers` engine
    processes, and time it. The first `hanging` webhooks point at `hang_sink`."""
    events = max(1, n // subscriptions)
    n = events * subscriptions
    healthy = subscriptions - hanging
    target = events * healthy
    engine_settings = {**ENGINE_DEFAULTS, **(settings or {})}
    async with fresh_database(r, scenario) as (db, url):
        workspace = await create_workspace(db)
        urls = [
            hang_sink.url(f"/hang/{i}")
            if hang_sink is not None and i < hanging
            else sink.url(f"/hook/{i}")
            for i in range(subscriptions)
        ]
        await create_webhooks(db, workspace, urls)
        publish_s = await publish_events(
            r, db, workspace, events, fanout=subscriptions, desc=f"{scenario}: publish"
        )
        async with db.acquire() as conn:
            await conn.execute("ANALYZE")
        await sink.reset()
        if hang_sink is not None:
            await hang_sink.reset()
        procs: list[Proc] = []
        profiler: Proc | None = None
        try:
            ports = [free_port() for _ in range(workers)]
            for i in range(workers):
                procs.append(
                    start_worker(
                        r,
                        url,
                        name=f"{scenario}-worker{i}",
                        metrics_port=ports[i],
                        **engine_settings,
                    )
                )
            meter = CpuMeter(
                {f"worker{i}": p.pid for i, p in enumerate(procs)} | {"sink": sink.proc.pid},
                await postmaster_pid(db),
            )

            async def delivering() -> bool:
                for proc in procs:
                    if not proc.alive():
                        raise RuntimeError(f"{proc.name} exited early:\n{proc.tail()}")
                return bool((await sink.stats())["count"])

            # Measure CPU (and profile) from the first delivery on, not the start-up.
            await wait_until(delivering, within=60, interval=0.05, what="the first delivery")
            statements_before = [await scrape_engine_metrics(port) for port in ports]
            meter.start()
            if profile_path is not None:
                py_spy = shutil.which("py-spy", path=str(r.venv_bin)) or "py-spy"
                spy_args = ["record", "--pid", str(procs[0].pid), "--rate", "200"]
                spy_args += ["--nonblocking", "--format", "raw", "--output", profile_path]
                profiler = start_process(r, f"{scenario}-py-spy", spy_args, executable=[py_spy])
            rss_peak = 0.0

            async def sample_rss() -> None:
                nonlocal rss_peak
                while True:
                    rss_peak = max(rss_peak, *(p.rss_mb() for p in procs))
                    await asyncio.sleep(0.2)

            sampler = asyncio.create_task(sample_rss())
            try:
                done_at = await wait_for_count(
                    r,
                    db,
                    target,
                    within=max(120.0, target / 200),
                    desc=f"{scenario}: drain x{workers}",
                    procs=procs,
                )
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            cpu = meter.stop()
            statements = [
                engine_statements(before, await scrape_engine_metrics(port), cpu["wall_seconds"])
                for before, port in zip(statements_before, ports, strict=True)
            ]
            stats = await sink.stats()
        finally:
            if profiler is not None:
                await stop_process(r, profiler, sig_int=True)
            for proc in procs:
                await stop_process(r, proc)
        if stats["count"] == 0:
            raise RuntimeError("the sink received nothing")
        seconds = done_at - stats["first"]
        sink_seconds = stats["last"] - stats["first"]
        async with db.acquire() as conn:
            by_status = {
                row["status"]: row["n"]
                for row in await conn.fetch(
                    "SELECT status, count(*) AS n FROM deliveries GROUP BY status"
                )
            }
        result = {
            "deliveries": target,
            "deliveries_total": n,
            "events": events,
            "subscriptions": subscriptions,
            "hanging_subscriptions": hanging,
            "workers": workers,
            "seconds": round(seconds, 3),
            "rate": target / seconds,
            "sink_rate": (stats["count"] - 1) / sink_seconds if sink_seconds > 0 else None,
            "sink_count": stats["count"],
            "sink_distinct": stats["distinct"],
            "duplicates": stats["duplicates"],
            "status_counts": by_status,
            "publish_seconds": round(publish_s, 3),
            "publish_rate": n / publish_s,
            "worker_rss_peak_mb": round(rss_peak, 1),
            "cpu": cpu,
            "cpu_us_per_delivery": {
                k: round(v / target * 1e6) for k, v in cpu["cpu_seconds"].items()
            },
            "engine_settings": engine_settings,
            "engine_statements": statements,
            "started": time.time(),
        }
        if hang_sink is not None:
            result["hang_sink"] = await hang_sink.stats()
        return result


async def run(r: Run) -> dict[str, Any]:
    ceiling = await r.require("ceiling")
    sink = await r.shared_sink()
    n = r.size(200_000, 5_000)
    result = await dispatcher_drain(r, sink, n, scenario=NAME)
    baseline = ceiling["measured"]["value"]
    value = result["rate"]
    share = value / baseline
    r.log(f"drain: {value:,.0f} deliveries/s = {share:.0%} of the ceiling ({baseline:,.0f})")
    return {
        "title": TITLE,
        "parameters": {
            "deliveries": result["deliveries"],
            "subscriptions": 100,
            "engine_processes": 1,
            "engine_settings": result["engine_settings"],
            "fsync": r.options.get("fsync"),
            "synchronous_commit": r.options.get("synchronous_commit"),
        },
        "measured": {"value": value, "unit": "deliveries/s", **result},
        "baseline": {"name": "ceiling (scenario 1)", "value": baseline, "unit": "req/s"},
        "ratio": share,
        "target": {"text": "≥ 75% of the ceiling", "op": ">=", "value": TARGET},
        "met": share >= TARGET and result["duplicates"] == 0,
        "notes": [
            "CPU during the drain (cores): "
            + ", ".join(f"{k} {v:.2f}" for k, v in result["cpu"]["cores_used"].items())
            + f"; machine {result['cpu']['machine_busy_fraction']:.0%} busy"
            + " (other users included); CPU per delivery (µs): "
            + ", ".join(f"{k} {v}" for k, v in result["cpu_us_per_delivery"].items())
        ],
        "summary": {
            "measured": f"{value:,.0f} deliveries/s (N={result['deliveries']:,})",
            "baseline": f"ceiling {baseline:,.0f} req/s",
            "ratio": f"{share:.2f}",
        },
    }
