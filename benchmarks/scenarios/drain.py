"""2. Drain throughput: 50,000 pending deliveries (100 webhooks x 500 events), drained end to end.

Each drain runs on a database created for it: the events are published with
`dispatcher_publish_event` (each fans out to the 100 subscriptions), and one
`python -m dispatcher worker` (default settings, fsync on) is started right after the publish.
The harness runs no ANALYZE and no VACUUM: the statistics are whatever autovacuum (as the
server ships it; `server.autovacuum` in the JSON) has made of the new tables by then, which is
what a real deployment sees after a burst. Timed from the first request the sink receives to
the moment the database shows every delivery `delivered` (claim → sign → POST → record).

Three drains, one after the other, same N, same sink:

- **fresh** (the figure): as above. Ratio: deliveries/s ÷ the ceiling's requests/s. Target ≥ 0.75.
- **analyzed** (for information): the same after a manual `ANALYZE` of the whole database,
  between the publish and the worker's start.
- **2 workers** (for information): the fresh drain with two worker processes on the same
  database: what a second process buys on this machine (ratio to one worker).

CPU per process per delivery (worker, sink, Postgres) is in each run's JSON; scenario `cpu`
compares it with the bare client's CPU per request.
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
    count_status,
    create_webhooks,
    create_workspace,
    effective_settings,
    engine_statements,
    free_port,
    fresh_database,
    limit_rate,
    postmaster_pid,
    publish_events,
    scrape_engine_metrics,
    start_process,
    start_worker,
    stop_process,
    wait_for_count,
    wait_until,
)
from dispatcher.store.database import Database

NAME = "drain"
TITLE = "2. Drain throughput"
TARGET = 0.75
TARGET_TEXT = "≥ 0.75 of the ceiling"
DEPENDS = ("ceiling",)
SUBSCRIPTIONS = 100
EVENTS = 500  # per subscription: 100 x 500 = 50,000 deliveries (quick: 100 x 50)

# The engine's settings for every throughput run: the product's defaults (as shipped; the
# effective values are written into each result as `engine_settings`), plus a metrics port.
ENGINE_DEFAULTS: dict[str, Any] = {}


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
    analyze: bool = False,
    limited: int = 0,
    rate_limit: int = 10,
) -> dict[str, Any]:
    """Publish n deliveries over `subscriptions` webhooks on a new database, start `workers`
    engine processes right after, and time the drain. The first `hanging` webhooks point at
    `hang_sink`; the last `limited` ones have a `rate_limit` (requests per second). The drain
    is timed to the other webhooks' last delivery. No ANALYZE/VACUUM unless `analyze` (then
    one ANALYZE before the workers)."""
    events = max(1, n // subscriptions)
    n = events * subscriptions
    healthy = subscriptions - hanging - limited
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
        limited_ids = await _subscribe(db, workspace, urls, limited, rate_limit)
        publish_s = await publish_events(
            r, db, workspace, events, fanout=subscriptions, desc=f"{scenario}: publish"
        )
        analyze_s = None
        if analyze:
            started = time.perf_counter()
            async with db.acquire() as conn:
                await conn.execute("ANALYZE", timeout=600)
            analyze_s = round(time.perf_counter() - started, 3)
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
                    excluding=limited_ids,
                )
                # What the limited webhooks had delivered by then (the others: all of theirs).
                limited_done = await count_status(db) - target if limited_ids else 0
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
            "limited_subscriptions": limited,
            "workers": workers,
            "seconds": round(seconds, 3),
            "rate": target / seconds,
            "sink_rate": (stats["count"] - 1) / sink_seconds if sink_seconds > 0 else None,
            "sink_count": stats["count"],
            "sink_distinct": stats["distinct"],
            "duplicates": stats["duplicates"],
            "status_counts": by_status,
            "publish_seconds": round(publish_s, 3),
            "harness_analyze": analyze,
            "analyze_seconds": analyze_s,
            "publish_rate": n / publish_s,
            "worker_rss_peak_mb": round(rss_peak, 1),
            "cpu": cpu,
            "cpu_us_per_delivery": {
                k: round(v / target * 1e6) for k, v in cpu["cpu_seconds"].items()
            },
            "engine_settings": effective_settings(url, **engine_settings),
            "engine_settings_set": engine_settings,
            "engine_statements": statements,
            "started": time.time(),
        }
        if hang_sink is not None:
            result["hang_sink"] = await hang_sink.stats()
        if limited:
            seconds_limited = max(done_at - stats["first"], 1e-9)
            result |= {
                "rate_limit": rate_limit,
                "limited_delivered": limited_done,
                "limited_rate": limited_done / seconds_limited,
            }
        return result


async def _subscribe(
    db: Database, workspace: str, urls: list[str], limited: int, rate_limit: int
) -> list[str]:
    """One webhook per URL, the last `limited` with a rate limit; returns their ids."""
    made = await create_webhooks(db, workspace, urls)
    limited_ids = [webhook_id for webhook_id, _ in made[len(made) - limited :]]
    if limited_ids:
        await limit_rate(db, limited_ids, rate_limit)
    return limited_ids


def cpu_note(result: dict[str, Any]) -> str:
    cpu = result["cpu"]
    return (
        "cores: "
        + ", ".join(f"{k} {v:.2f}" for k, v in cpu["cores_used"].items())
        + f" (machine {cpu['machine_busy_fraction']:.0%} busy, other users included); "
        + "µs per delivery: "
        + ", ".join(f"{k} {v}" for k, v in result["cpu_us_per_delivery"].items())
    )


async def run(r: Run) -> dict[str, Any]:
    ceiling = await r.require("ceiling")
    if ceiling.get("error"):
        raise RuntimeError("scenario 1 (ceiling) failed; nothing to divide by")
    sink = await r.shared_sink()
    n = r.size(SUBSCRIPTIONS * EVENTS, SUBSCRIPTIONS * 50)
    fresh = await dispatcher_drain(r, sink, n, scenario=NAME)
    baseline = ceiling["measured"]["value"]
    value = fresh["rate"]
    share = value / baseline
    r.log(f"drain (fresh): {value:,.0f} deliveries/s = {share:.0%} of the ceiling {baseline:,.0f}")
    analyzed = await dispatcher_drain(r, sink, n, scenario="drain_analyzed", analyze=True)
    a_share = analyzed["rate"] / baseline
    r.log(f"drain (after ANALYZE): {analyzed['rate']:,.0f} deliveries/s = {a_share:.0%}")
    two = await dispatcher_drain(r, sink, n, scenario="drain_x2", workers=2)
    buys = two["rate"] / value
    r.log(f"drain (2 workers): {two['rate']:,.0f} deliveries/s = {buys:.2f}x one worker")
    met = share >= TARGET and fresh["duplicates"] == 0
    cores = two["cpu"]["machine_cores"]
    worker_cores = sum(v for k, v in two["cpu"]["cores_used"].items() if k.startswith("worker"))
    one_worker_cores = fresh["cpu"]["cores_used"].get("worker0", 0.0)
    two_note = (
        f"2 workers: {two['rate']:,.0f} deliveries/s = {buys:.2f}x one worker "
        f"({two['duplicates']} duplicates). The two worker processes used {worker_cores:.2f} "
        f"cores together against {one_worker_cores:.2f} for one, Postgres "
        f"{two['cpu']['cores_used'].get('postgres', 0):.2f} against "
        f"{fresh['cpu']['cores_used'].get('postgres', 0):.2f}, the machine "
        f"{two['cpu']['machine_busy_fraction']:.0%} busy of {cores} cores: a second process "
        "can only use what the first leaves idle (its waits on Postgres and the network), "
        "on a machine whose cores the sink and Postgres share."
    )
    rows = [
        {
            "label": "2. Drain, fresh database (1 worker)",
            "measured": f"{value:,.0f} deliveries/s (N={fresh['deliveries']:,}, no ANALYZE)",
            "baseline": f"ceiling {baseline:,.0f} req/s",
            "ratio": f"{share:.2f}",
            "target": TARGET_TEXT,
            "met": met,
        },
        {
            "label": "2a. Drain after a manual ANALYZE (for information)",
            "measured": f"{analyzed['rate']:,.0f} deliveries/s (N={analyzed['deliveries']:,})",
            "baseline": f"ceiling {baseline:,.0f} req/s",
            "ratio": f"{a_share:.2f}",
            "target": TARGET_TEXT + " (for information)",
            "met": a_share >= TARGET and analyzed["duplicates"] == 0,
            "info": True,
        },
        {
            "label": "2b. Drain with 2 workers (what a second process buys)",
            "measured": f"{two['rate']:,.0f} deliveries/s, {two['duplicates']} duplicates",
            "baseline": f"1 worker {value:,.0f} deliveries/s",
            "ratio": f"{buys:.2f}x",
            "target": "reported (no target)",
            "met": None,
            "info": True,
        },
    ]
    return {
        "title": TITLE,
        "parameters": {
            "deliveries": fresh["deliveries"],
            "subscriptions": SUBSCRIPTIONS,
            "events": fresh["events"],
            "engine_processes": 1,
            "engine_settings": fresh["engine_settings"],
            "database": "created for each drain; no ANALYZE/VACUUM by the harness "
            "(autovacuum as the server ships it), except the analyzed variant",
            "worker_start": "right after the publish",
            "fsync": r.options.get("fsync"),
            "synchronous_commit": r.options.get("synchronous_commit"),
            "autovacuum": r.options.get("autovacuum"),
        },
        "measured": {"value": value, "unit": "deliveries/s", **fresh},
        "baseline": {"name": "ceiling (scenario 1)", "value": baseline, "unit": "req/s"},
        "ratio": share,
        "target": {"text": TARGET_TEXT, "op": ">=", "value": TARGET},
        "met": met,
        "analyzed": {"ratio": a_share, "target": TARGET, "met": a_share >= TARGET, **analyzed},
        "two_workers": {"ratio_to_one": buys, **two},
        "rows": rows,
        "notes": [
            f"fresh: {cpu_note(fresh)}",
            f"analyzed: {cpu_note(analyzed)}",
            two_note,
        ]
        + (
            []
            if r.options.get("autovacuum") == "on"
            else ["the server runs with autovacuum off: no statistics at all on the new tables"]
        ),
        "summary": {
            "measured": rows[0]["measured"],
            "baseline": rows[0]["baseline"],
            "ratio": rows[0]["ratio"],
        },
    }
