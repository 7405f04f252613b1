"""3. Peer baselines: the same drain done by the two queues a user would reach for, at their best.

Same N as scenario 2, same 100 endpoints on the same sink, same machine, same run. A peer is
measured at its best, so each is swept over its knobs in this run, every point on a database
created for it, its jobs enqueued first, one consumer process started right after, timed the
same way as dispatcher's drain: from the first request the sink receives until the peer's job
table is empty. As for dispatcher, the harness runs no ANALYZE/VACUUM. Every point is reported
(with the load average when it started); the fastest of each peer is that peer's baseline.

- PgQueuer + aiohttp (benchmarks/peer_pgqueuer.py), 8 points: batch size
  (`QueueManager.run(batch_size=...)`) 10, 50, 100, 500 x the entrypoint's concurrency limit
  none (PgQueuer's default) and 100. Ratio: dispatcher's fresh drain ÷ its best. Target ≥ 1.5.
- Graphile Worker 0.17 on Node (benchmarks/peer_graphile/: node:http with one keep-alive
  `http.Agent`, `maxSockets` = concurrency, the same Standard Webhooks signature), 24 points:
  `concurrency` 10, 50, 100, 200 x `localQueue.size` off, 50, 500 x `completeJobBatchDelay` =
  `failJobBatchDelay` off (-1) and 10 ms; jobs added with `addJobs` (one `add_jobs` statement
  per 2,000). Ratio: dispatcher's fresh drain ÷ its best. Target ≥ 1.2. Its node_modules are
  installed with `npm ci` on first use; without Node/npm these points fail (and say why) and
  PgQueuer's stand.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from tqdm import tqdm

from benchmarks import sweeps
from benchmarks.common import (
    ROOT,
    WORK,
    CpuMeter,
    Proc,
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
TITLE = "3. Peer baselines (PgQueuer, best of 8; Graphile Worker, best of 24)"
TARGET = 1.5
TARGET_TEXT = "≥ 1.5x PgQueuer's best point"
GRAPHILE_TARGET = 1.2
GRAPHILE_TARGET_TEXT = "≥ 1.2x Graphile Worker's best point"
BATCH_SIZES = (10, 50, 100, 500)
CONCURRENCY_LIMITS = (0, 100)  # 0: no limit (PgQueuer's default)
GRAPHILE_DIR = ROOT / "peer_graphile"
GRAPHILE_SCRIPT = str(GRAPHILE_DIR / "peer.js")


def label(point: dict[str, Any]) -> str:
    limit = point["concurrency_limit"] or "none"
    return f"batch {point['batch_size']}, limit {limit}"


async def helper(*args: str, within: float = 900) -> dict[str, Any]:
    result: dict[str, Any] = await run_json(
        ["-m", "benchmarks.peer_pgqueuer", *args], within=within, what=f"peer_pgqueuer {args[0]}"
    )
    return result


async def graphile_helper(*args: str, within: float = 900) -> dict[str, Any]:
    result: dict[str, Any] = await run_json(
        [GRAPHILE_SCRIPT, *args],
        within=within,
        what=f"peer_graphile {args[0]}",
        executable=[node_binary()],
    )
    return result


def node_binary() -> str:
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not on PATH: Graphile Worker's points need Node 20+")
    return node


async def ensure_graphile_installed() -> None:
    """`npm ci` in benchmarks/peer_graphile when its node_modules are missing (bounded): the
    exact versions of package-lock.json, never a newer one."""
    if (GRAPHILE_DIR / "node_modules" / "graphile-worker" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH: cannot install benchmarks/peer_graphile")
    proc = await asyncio.create_subprocess_exec(
        npm,
        "ci",
        "--no-audit",
        "--no-fund",
        cwd=GRAPHILE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"npm ci failed: {out.decode(errors='replace')[-2000:]}")


def write_endpoints(r: Run, sink: Sink, tag: str) -> Path:
    """100 endpoints on the sink, each with its own secret, in a file for the peer's enqueue."""
    endpoints = [{"url": sink.url(f"/peer/{i}"), "secret": new_secret()} for i in range(100)]
    path = WORK / "logs" / f"{r.run_id}-{tag}-endpoints.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(endpoints))
    return path


async def timed_drain(
    r: Run,
    sink: Sink,
    db: Database,
    proc: Proc,
    n: int,
    *,
    tag: str,
    what: str,
    jobs_left: str,
) -> dict[str, Any]:
    """Time a peer's consumer `proc` as dispatcher's drain is timed: from the first request
    the sink receives until the query `jobs_left` counts no job; CPU per process over the
    same window. Stops `proc` in any case."""
    try:
        meter = CpuMeter({"peer": proc.pid, "sink": sink.proc.pid}, await postmaster_pid(db))

        async def delivering() -> bool:
            if not proc.alive():
                raise RuntimeError(f"peer exited early:\n{proc.tail()}")
            return bool((await sink.stats())["count"])

        # CPU from the first delivery on, as for dispatcher (not the start-up).
        await wait_until(delivering, within=60, interval=0.05, what=f"the first {what} job")
        meter.start()
        with tqdm(
            total=n, desc=f"peer ({tag})", unit="job", leave=False, unit_scale=True, position=1
        ) as bar:

            async def empty() -> bool:
                async with db.acquire() as conn:
                    left: int = await conn.fetchval(jobs_left)
                bar.update(n - left - bar.n)
                if left and not proc.alive():
                    raise RuntimeError(f"peer exited early:\n{proc.tail()}")
                return left == 0

            done_at = await wait_until(
                empty, within=max(180.0, n / 100), interval=0.2, what=f"{what} drain"
            )
        cpu = meter.stop()
        stats = await sink.stats()
    finally:
        await stop_process(r, proc)
    seconds = done_at - stats["first"]
    return {
        "jobs": n,
        "seconds": round(seconds, 3),
        "rate": n / seconds,
        "sink_count": stats["count"],
        "duplicates": stats["duplicates"],
        "sink_rate": (stats["count"] - 1) / (stats["last"] - stats["first"])
        if stats["last"] > stats["first"]
        else None,
        "cpu": cpu,
        "cpu_us_per_job": {k: round(v / n * 1e6) for k, v in cpu["cpu_seconds"].items()},
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


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
        path = write_endpoints(r, sink, "peer")
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
        started_load = loadavg()
        args = ["consume", "--dsn", dsn, "--concurrency", str(concurrency_limit)]
        args += ["--batch-size", str(batch_size), "--driver", "connection"]
        proc = start_process(r, f"peer-{tag}", ["-m", "benchmarks.peer_pgqueuer", *args])
        timed = await timed_drain(
            r,
            sink,
            db,
            proc,
            n,
            tag=tag,
            what="PgQueuer",
            jobs_left="SELECT count(*) FROM pgqueuer",
        )
        return {
            "batch_size": batch_size,
            "concurrency_limit": concurrency_limit,
            **timed,
            "enqueue_seconds": round(enqueue_s, 3),
            "loadavg": started_load,
        }
    finally:
        await db.close()
        if not r.options.get("keep_databases"):
            await drop_database(r, name)


async def graphile_drain(
    r: Run,
    sink: Sink,
    n: int,
    concurrency: int,
    local_queue: int,
    batch_delay_ms: int,
    max_pool_size: int,
) -> dict[str, Any]:
    """One Graphile Worker point: a new database, Graphile's migrations, n jobs added in bulk,
    one `node peer.js work` process with these knobs, timed."""
    events = max(1, n // 100)
    n = events * 100
    tag = f"gw_c{concurrency}_q{sweeps.off(local_queue)}_d{sweeps.off(batch_delay_ms)}"
    name = r.db_name(f"peer_{tag}")
    dsn = await create_database(r, name)
    db = await Database.open(dsn, min_size=1, max_size=2)
    try:
        await graphile_helper("install", "--dsn", dsn)
        path = write_endpoints(r, sink, "peer-graphile")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        enqueued = await graphile_helper(
            "enqueue", "--dsn", dsn, "--events", str(events), "--endpoints-file", str(path)
        )
        enqueue_s = loop.time() - t0
        path.unlink(missing_ok=True)
        if enqueued["enqueued"] != n:
            raise RuntimeError(f"enqueued {enqueued['enqueued']} of {n}")
        await sink.reset()
        started_load = loadavg()
        args = [GRAPHILE_SCRIPT, "work", "--dsn", dsn, "--concurrency", str(concurrency)]
        args += ["--local-queue", str(local_queue), "--batch-delay", str(batch_delay_ms)]
        args += ["--max-pool-size", str(max_pool_size)]
        proc = start_process(r, f"peer-{tag}", args, executable=[node_binary()])
        # The table under Graphile's `jobs` view: a finished job is deleted from it (once its
        # completion batch is flushed, when batching is on).
        timed = await timed_drain(
            r,
            sink,
            db,
            proc,
            n,
            tag=tag,
            what="Graphile Worker",
            jobs_left="SELECT count(*) FROM graphile_worker._private_jobs",
        )
        return {
            "concurrency": concurrency,
            "local_queue": local_queue,
            "batch_delay_ms": batch_delay_ms,
            "max_pool_size": max_pool_size,
            **timed,
            "enqueue_seconds": round(enqueue_s, 3),
            "loadavg": started_load,
        }
    finally:
        await db.close()
        if not r.options.get("keep_databases"):
            await drop_database(r, name)


async def sweep(
    r: Run,
    grid: list[dict[str, Any]],
    measure: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
    describe: Callable[[dict[str, Any]], str],
    peer: str,
) -> list[dict[str, Any]]:
    """Every point of `grid` measured in turn; a point that fails keeps its error."""
    points: list[dict[str, Any]] = []
    for knobs in grid:
        point = dict(knobs)
        try:
            point = await measure(knobs)
            r.log(
                f"peer: {peer} {describe(point)}: {point['rate']:,.0f} jobs/s "
                f"(load {point['loadavg'][0]:.2f})"
            )
        except Exception as exc:  # one point failing does not hide the others
            point["error"] = f"{type(exc).__name__}: {exc}"
            r.log(f"peer: {peer} {describe(point)} FAILED: {exc!r}")
        points.append(point)
    return points


async def graphile_points(r: Run, sink: Sink, n: int) -> list[dict[str, Any]]:
    grid: list[dict[str, Any]] = list(sweeps.graphile_grid())
    try:
        await ensure_graphile_installed()
        node_binary()
    except Exception as exc:  # no Node here: every point says why, PgQueuer's still stand
        r.log(f"peer: Graphile Worker not measured: {exc}")
        return [{**knobs, "error": f"{type(exc).__name__}: {exc}"} for knobs in grid]

    async def measure(knobs: dict[str, Any]) -> dict[str, Any]:
        return await graphile_drain(
            r,
            sink,
            n,
            knobs["concurrency"],
            knobs["local_queue"],
            knobs["batch_delay_ms"],
            knobs["max_pool_size"],
        )

    return await sweep(r, grid, measure, sweeps.graphile_label, "Graphile Worker")


def graphile_version() -> str | None:
    try:
        package = GRAPHILE_DIR / "node_modules" / "graphile-worker" / "package.json"
        version: str = orjson.loads(package.read_bytes())["version"]
        return version
    except (OSError, KeyError, orjson.JSONDecodeError):
        return None


async def run(r: Run) -> dict[str, Any]:
    drain = await r.require("drain")
    if drain.get("error"):
        raise RuntimeError("scenario 2 (drain) failed; nothing to compare with")
    sink = await r.shared_sink()
    n = drain["measured"]["deliveries"]

    async def measure_pgqueuer(knobs: dict[str, Any]) -> dict[str, Any]:
        return await pgqueuer_drain(r, sink, n, knobs["batch_size"], knobs["concurrency_limit"])

    grid = [
        {"batch_size": batch, "concurrency_limit": limit}
        for limit in CONCURRENCY_LIMITS
        for batch in BATCH_SIZES
    ]
    points = await sweep(r, grid, measure_pgqueuer, label, "PgQueuer")
    graphile = await graphile_points(r, sink, n)
    best = sweeps.best_point(points)
    if best is None:
        raise RuntimeError("no PgQueuer point could be measured")
    value = drain["measured"]["value"]
    baseline = best["rate"]
    share = value / baseline
    r.log(f"peer: dispatcher {value:,.0f} / PgQueuer best ({label(best)}) {baseline:,.0f}")
    graphile_best = sweeps.best_point(graphile)
    graphile_share = value / graphile_best["rate"] if graphile_best else None
    graphile_met = graphile_share >= GRAPHILE_TARGET if graphile_share is not None else False
    if graphile_best:
        r.log(
            f"peer: dispatcher {value:,.0f} / Graphile Worker best "
            f"({sweeps.graphile_label(graphile_best)}) {graphile_best['rate']:,.0f}"
        )

    def sweep_text(limit: int) -> str:
        return " / ".join(sweeps.rate_text(p) for p in points if p["concurrency_limit"] == limit)

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
        {
            "label": "3b. Peer: dispatcher ÷ Graphile Worker's best point",
            "measured": f"dispatcher {value:,.0f} deliveries/s (fresh drain)",
            "baseline": f"Graphile Worker {graphile_best['rate']:,.0f} jobs/s "
            f"({sweeps.graphile_label(graphile_best)}; N={n:,})"
            if graphile_best
            else "not measured: " + str(graphile[0].get("error", "—")),
            "ratio": f"{graphile_share:.2f}x" if graphile_share is not None else "—",
            "target": GRAPHILE_TARGET_TEXT,
            "met": graphile_met,
        },
        {
            "label": "3c. Graphile Worker sweep, jobs/s (for information)",
            "measured": "localQueue/batch delay per concurrency: "
            + sweeps.graphile_sweep_text(graphile),
            "baseline": "—",
            "ratio": "—",
            "target": "every point reported",
            "met": None,
            "info": True,
        },
    ]
    drain_cpu = drain["measured"]["cpu_us_per_delivery"]
    notes = [
        "CPU per delivery (µs): dispatcher "
        + ", ".join(f"{k} {v}" for k, v in drain_cpu.items())
        + f"; PgQueuer at its best point ({label(best)}) "
        + ", ".join(f"{k} {v}" for k, v in best["cpu_us_per_job"].items())
        + (
            f"; Graphile Worker at its best point ({sweeps.graphile_label(graphile_best)}) "
            + ", ".join(f"{k} {v}" for k, v in graphile_best["cpu_us_per_job"].items())
            if graphile_best
            else ""
        ),
        "load average (1 min) at the start of each point: PgQueuer "
        + ", ".join(f"{p['loadavg'][0]:.2f}" for p in points if "loadavg" in p)
        + "; Graphile Worker "
        + ", ".join(f"{p['loadavg'][0]:.2f}" for p in graphile if "loadavg" in p),
    ]
    notes += [f"PgQueuer {label(p)}: {p['error']}" for p in points if "error" in p]
    notes += [
        f"Graphile Worker {sweeps.graphile_label(p)}: {p['error']}"
        for p in graphile
        if "error" in p
    ]
    graphile_result: dict[str, Any] = {
        "version": graphile_version(),
        "points": graphile,
        "baseline": {
            "name": f"Graphile Worker, best point ({sweeps.graphile_label(graphile_best)})",
            "value": graphile_best["rate"],
            "unit": "jobs/s",
            **graphile_best,
        }
        if graphile_best
        else None,
        "ratio": graphile_share,
        "target": {"text": GRAPHILE_TARGET_TEXT, "op": ">=", "value": GRAPHILE_TARGET},
        "met": graphile_met,
    }
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
            "graphile_worker": {
                "version": graphile_version(),
                "concurrency": list(sweeps.GRAPHILE_CONCURRENCY),
                "local_queue_size": [sweeps.off(q) for q in sweeps.GRAPHILE_LOCAL_QUEUE],
                "complete_and_fail_job_batch_delay_ms": [
                    sweeps.off(d) for d in sweeps.GRAPHILE_BATCH_DELAY_MS
                ],
                "max_pool_size": f"concurrency, at most {sweeps.GRAPHILE_MAX_POOL_SIZE}",
                "enqueue": "WorkerUtils.addJobs, 2,000 jobs per call (graphile_worker.add_jobs)",
                "http": "node:http, one keep-alive http.Agent, maxSockets = concurrency",
                "logging": "warnings and above (Graphile logs each completed job at info)",
                "what_it_does": "one job per delivery; sign (node:crypto HMAC-SHA256) + POST; "
                "a completed job is deleted (no delivery row, no per-endpoint limit)",
            },
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
        "graphile": graphile_result,
        "met": share >= TARGET and graphile_met,
        "rows": rows,
        "notes": notes,
        "summary": {
            "measured": rows[0]["measured"],
            "baseline": rows[0]["baseline"] + "; " + rows[2]["baseline"],
            "ratio": rows[0]["ratio"] + " / " + rows[2]["ratio"],
        },
    }
