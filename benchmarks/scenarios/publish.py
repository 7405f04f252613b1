"""16. Publish: what one POST /v1/events and POST /v1/messages cost, against the API ceiling.

Issue #22, part 1. In one run, on one machine, each driven by `wrk` (a compiled load generator
from Debian, `benchmarks/wrk/publish.lua`, one thread, 100 connections, flat out):

- **the minimal app** (benchmarks/minimal_app.py): aiohttp + orjson + an asyncpg pool, one
  `INSERT` per request, each its own commit: the ceiling of an API that stores each request
  before answering it;
- **`dispatcher serve`** as shipped (engine on, request logs at info), no subscription:
  POST /v1/events, then POST /v1/messages.

Each is warmed up for a few seconds first (plan caches, the key cache, pools), then measured:
req/s, p50/p99 (wrk's), and the CPU per request of the server process, of Postgres (the
postmaster, its shared processes and every backend of the measured database: `CpuMeter`) and of
wrk itself, so that the load generator is shown not to be the bottleneck. The machine's load
average is written beside each figure: the machine is shared, and CPU per request is the
steadier figure.

With `--profile` (or in a full run), the serve process is then sampled by py-spy during one
more run of each kind: `profile-publish.svg` and `profile-messages.svg` (flame graphs) in the
results directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from benchmarks.common import (
    ROOT,
    CpuMeter,
    Postgres,
    Proc,
    Run,
    create_api_key,
    create_database,
    create_webhooks,
    dispatcher_cli,
    drop_database,
    effective_settings,
    free_port,
    fresh_database,
    postmaster_pid,
    start_process,
    start_serve,
    stop_process,
    wait_until,
)

NAME = "publish"
TITLE = "16. Publish (POST /v1/events, /v1/messages) against a minimal aiohttp + asyncpg app"
CONNECTIONS = 100
BATCH = 100  # events per POST /v1/events/batch
# Connections sending batches: each batch holds a pool connection for its statement, so more
# clients than the pool has connections only wait (and past DISPATCHER_POOL_ACQUIRE_TIMEOUT
# are refused, 503 `overloaded`: backpressure as designed).
BATCH_CONNECTIONS = 10
NUMBER = "+15555550100"
EVENTS_TARGET = 4000.0
MESSAGES_TARGET = 2000.0
RATIO_TARGET = 1.0
SERVE_CPU_TARGET_US = 150
POSTGRES_CPU_TARGET_US = 120
TARGET_TEXT = (
    "events ≥ 4,000/s and ≥ 1.0x the minimal app; serve ≤ 150 / Postgres ≤ 120 µs CPU per "
    "event; messages ≥ 2,000/s"
)
SCRIPT = ROOT / "wrk" / "publish.lua"


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise RuntimeError("scenario publish needs wrk (Debian: apt-get install wrk)")
    return found


async def drive(
    url: str,
    seconds: float,
    watched: dict[str, int],
    postgres: Postgres | None,
    *,
    kind: str,
    key: str = "",
    prefix: str = "W",
    profile: Path | None = None,
    connections: int = CONNECTIONS,
) -> dict[str, Any]:
    """wrk against `url` for `seconds`, the CPU of `watched` processes, Postgres and wrk
    metered meanwhile; with `profile`, py-spy samples watched["server"] into that SVG."""
    env = {**os.environ, "WRK_KIND": kind, "WRK_KEY": key, "WRK_FROM": NUMBER, "WRK_PREFIX": prefix}
    args = ["-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(SCRIPT)]
    spy = None
    if profile is not None:
        spy = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "py-spy"),
            "record", "--format", "flamegraph", "--output", str(profile),
            "--duration", str(int(seconds)), "--rate", "250", "--nonblocking",
            "--pid", str(watched["server"]),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
    loadavg = [round(x, 2) for x in os.getloadavg()]
    wrk = await asyncio.create_subprocess_exec(
        wrk_binary(), *args, url,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    meter = CpuMeter({**watched, "wrk": wrk.pid}, postgres)
    meter.start()
    try:
        out, err = await asyncio.wait_for(wrk.communicate(), timeout=seconds + 60)
    finally:
        if wrk.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                wrk.kill()
            await wrk.wait()
    cpu = meter.stop()
    if spy is not None:
        await asyncio.wait_for(spy.wait(), timeout=60)
    if wrk.returncode != 0:
        raise RuntimeError(f"wrk failed ({wrk.returncode}): {err.decode(errors='replace')[-2000:]}")
    figures = orjson.loads(out.decode().strip().splitlines()[-1])
    requests = figures["requests"]
    errors = sum(figures[k] for k in ("non_2xx", "connect_errors", "read_errors", "timeouts"))
    rate = (requests - errors) / (figures["duration_us"] / 1e6)
    return {
        "ok_rps": round(rate, 1),
        "requests": requests,
        "errors": errors,
        "p50_ms": figures["p50_us"] / 1000,
        "p99_ms": figures["p99_us"] / 1000,
        "max_ms": figures["max_us"] / 1000,
        "wrk": figures,
        "cpu": cpu,
        "cpu_us_per_request": {
            name: round(used / requests * 1e6) if requests else None
            for name, used in cpu["cpu_seconds"].items()
        },
        "loadavg_before": loadavg,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


async def start_minimal(r: Run, url: str) -> tuple[Proc, str]:
    port = free_port()
    args = ["-m", "benchmarks.minimal_app", "--port", str(port), "--database-url", url]
    proc = start_process(r, "minimal-app", args)
    base = f"http://127.0.0.1:{port}"

    async def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"minimal app exited:\n{proc.tail()}")
        try:
            timeout = aiohttp.ClientTimeout(total=5)
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
                session.get(f"{base}/readyz") as response,
            ):
                return response.status == 200
        except (aiohttp.ClientError, OSError):
            return False

    await wait_until(ready, within=60, interval=0.1, what="minimal app to be ready")
    return proc, base


def describe(label: str, m: dict[str, Any]) -> str:
    cpu = ", ".join(f"{k} {v}" for k, v in m["cpu_us_per_request"].items())
    return (
        f"{label}: {m['ok_rps']:,.0f} req/s (p50 {m['p50_ms']:.1f} / p99 {m['p99_ms']:.1f} ms, "
        f"{m['errors']} errors); CPU µs/request: {cpu}; load {m['loadavg_before'][0]:.2f}"
    )


async def run(r: Run) -> dict[str, Any]:
    seconds = 5.0 if r.quick else 20.0
    warm = 2.0 if r.quick else 5.0
    profiled = bool(r.options.get("profile_publish", not r.quick))
    async with fresh_database(r, NAME) as (db, url):
        workspace = (await dispatcher_cli(url, "workspaces", "create", "bench-publish"))["id"]
        await dispatcher_cli(url, "numbers", "add", workspace, NUMBER)
        key = await create_api_key(url, workspace, ["events:write", "messages:write"])
        pg = await postmaster_pid(db)

        # The minimal app, on a database of its own (its backends metered alone).
        minimal_name = r.db_name("publish_minimal")
        minimal_url = await create_database(r, minimal_name)
        minimal_pg = Postgres(pg.pid, minimal_name) if pg is not None else None
        proc, base = await start_minimal(r, minimal_url)
        try:
            watched = {"server": proc.pid}
            await drive(f"{base}/v1/events", warm, watched, minimal_pg, kind="events")
            minimal = await drive(f"{base}/v1/events", seconds, watched, minimal_pg, kind="events")
        finally:
            await stop_process(r, proc)
            if not r.options.get("keep_databases"):
                await drop_database(r, minimal_name)
        r.log(describe("publish: minimal app", minimal))

        serve, base = await start_serve(r, url, name="publish-serve")
        try:
            watched = {"server": serve.pid}
            measured: dict[str, dict[str, Any]] = {}
            for kind in ("events", "messages"):
                target = f"{base}/v1/{kind}"
                await drive(target, warm, watched, pg, kind=kind, key=key, prefix="warm")
                measured[kind] = await drive(target, seconds, watched, pg, kind=kind, key=key)
                r.log(describe(f"publish: dispatcher {kind}", measured[kind]))
            # Batches of 100 events (POST /v1/events/batch): no subscriber, then one (the
            # shared sink; the engine in the same process delivers every event meanwhile).
            batch_url = f"{base}/v1/events/batch"
            batch = partial(drive, batch_url, seconds, watched, pg, kind="batch", key=key,
                            connections=BATCH_CONNECTIONS)  # fmt: skip
            await batch(prefix="bwarm")
            batches = {"none": await batch(prefix="B0")}
            sink = await r.shared_sink()
            await create_webhooks(db, workspace, [sink.url("/hook/batch")])
            batches["one"] = await batch(prefix="B1")
            for label, figures in batches.items():
                r.log(describe(f"publish: batches of 100, {label} subscriber", figures))
            if profiled:
                for kind, svg in (("events", "profile-publish.svg"),
                                  ("messages", "profile-messages.svg")):  # fmt: skip
                    r.results_dir.mkdir(parents=True, exist_ok=True)
                    await drive(
                        f"{base}/v1/{kind}", seconds, watched, pg, kind=kind, key=key,
                        prefix="prof", profile=r.results_dir / svg,
                    )  # fmt: skip
        finally:
            await stop_process(r, serve)
        settings = effective_settings(url, demo="off", log_level="info")

    events, messages = measured["events"], measured["messages"]
    ratio = events["ok_rps"] / minimal["ok_rps"] if minimal["ok_rps"] else 0.0
    serve_us = events["cpu_us_per_request"]["server"]
    pg_us = events["cpu_us_per_request"].get("postgres")
    rows = [
        {
            "label": "16. Publish: POST /v1/events flat out (100 connections, wrk), no subscriber",
            "measured": describe("dispatcher", events),
            "baseline": describe("minimal aiohttp + asyncpg app", minimal),
            "ratio": f"{ratio:.2f}x the minimal app; {events['ok_rps'] / EVENTS_TARGET:.2f} of "
            "4,000/s",
            "target": "≥ 4,000/s and ≥ 1.0x the minimal app",
            "met": events["ok_rps"] >= EVENTS_TARGET and ratio >= RATIO_TARGET,
        },
        {
            "label": "16a. Publish: CPU per POST /v1/events (serve / Postgres)",
            "measured": f"serve {serve_us} / Postgres {pg_us} µs",
            "baseline": f"targets {SERVE_CPU_TARGET_US} / {POSTGRES_CPU_TARGET_US} µs",
            "ratio": f"{serve_us / SERVE_CPU_TARGET_US:.2f} / "
            + (f"{pg_us / POSTGRES_CPU_TARGET_US:.2f}" if pg_us is not None else "—"),
            "target": "serve ≤ 150 µs, Postgres ≤ 120 µs",
            "met": serve_us <= SERVE_CPU_TARGET_US
            and pg_us is not None
            and pg_us <= POSTGRES_CPU_TARGET_US,
        },
        {
            "label": "16c. Batch publish: POST /v1/events/batch, 100 events per request, no "
            "subscriber / one subscriber (wrk, 10 connections)",
            "measured": f"{batches['none']['ok_rps'] * BATCH:,.0f} / "
            f"{batches['one']['ok_rps'] * BATCH:,.0f} events/s (p99 "
            f"{batches['none']['p99_ms']:,.1f} / {batches['one']['p99_ms']:,.1f} ms per batch)",
            "baseline": "targets 20,000 / 10,000 events/s",
            "ratio": f"{batches['none']['ok_rps'] * BATCH / 20_000:.2f} / "
            f"{batches['one']['ok_rps'] * BATCH / 10_000:.2f}",
            "target": "≥ 20,000 / ≥ 10,000 events/s",
            "met": batches["none"]["ok_rps"] * BATCH >= 20_000
            and batches["one"]["ok_rps"] * BATCH >= 10_000,
        },
        {
            "label": "16b. Publish: POST /v1/messages flat out (100 connections, wrk)",
            "measured": describe("dispatcher", messages),
            "baseline": f"target {MESSAGES_TARGET:,.0f}/s",
            "ratio": f"{messages['ok_rps'] / MESSAGES_TARGET:.2f} of 2,000/s",
            "target": "≥ 2,000/s",
            "met": messages["ok_rps"] >= MESSAGES_TARGET,
        },
    ]
    return {
        "title": TITLE,
        "parameters": {
            "connections": CONNECTIONS,
            "seconds": seconds,
            "warm_up_seconds": warm,
            "load_generator": "wrk -t1 -c100, benchmarks/wrk/publish.lua",
            "server": "dispatcher serve, engine on, request logs at info (as shipped)",
            "engine_settings": settings,
            "minimal_app": "benchmarks/minimal_app.py: aiohttp + orjson + asyncpg pool of 10, "
            "one INSERT per request, its own commit",
            "subscriptions": "none",
        },
        "measured": {
            "value": events["ok_rps"],
            "unit": "req/s (POST /v1/events, flat out)",
            "events": events,
            "messages": messages,
            "batches": batches,
            "minimal_app": minimal,
        },
        "baseline": {"name": "minimal aiohttp + asyncpg app", "value": minimal["ok_rps"]},
        "ratio": ratio,
        "target": {"text": TARGET_TEXT},
        "met": all(bool(row["met"]) for row in rows),
        "rows": rows,
        "summary": {
            "measured": rows[0]["measured"],
            "baseline": rows[0]["baseline"],
            "ratio": rows[0]["ratio"],
        },
    }
