"""3. Peer baseline: the same drain done the obvious way with PgQueuer and aiohttp.

Same N as scenario 2, same 100 endpoints on the same sink, same machine, same run: N jobs are
enqueued into a fresh database with PgQueuer's own schema (`pgqueuer install`), then one
consumer process (benchmarks/peer_pgqueuer.py) drains them, timed the same way as dispatcher:
from the first request the sink receives until the queue table is empty. Ratio: dispatcher's
drain ÷ PgQueuer's.

PgQueuer is given a sensible configuration, not its defaults: `batch_size=100` (its default, 10,
is about half as fast here) and `concurrency_limit=100` on the entrypoint. In full runs its
default batch size is measured too, on at most 20k jobs, for information.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson

from benchmarks.common import (
    REPO,
    WORK,
    CpuMeter,
    Run,
    Sink,
    create_database,
    drop_database,
    postmaster_pid,
    start_process,
    stop_process,
    wait_until,
)
from dispatcher.domain.signing import new_secret
from dispatcher.store.database import Database

NAME = "peer"
TITLE = "3. Peer baseline (PgQueuer)"
TARGET = 3.0
TUNED = {"concurrency": 100, "batch_size": 100, "driver": "connection"}
DEFAULTS = {"concurrency": 100, "batch_size": 10, "driver": "connection"}


async def helper(*args: str, within: float = 900) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.peer_pgqueuer",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(
            f"peer_pgqueuer {args[0]} failed: {err.decode(errors='replace')[-3000:]}"
        )
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


async def pgqueuer_drain(
    r: Run, sink: Sink, n: int, config: dict[str, Any], label: str
) -> dict[str, Any]:
    events = max(1, n // 100)
    n = events * 100
    name = r.db_name(f"peer_{label}")
    dsn = await create_database(r, name)
    db = await Database.open(dsn, min_size=1, max_size=2)
    try:
        await helper("install", "--dsn", dsn)
        endpoints = [{"url": sink.url(f"/peer/{i}"), "secret": new_secret()} for i in range(100)]
        path = WORK / "logs" / f"{r.run_id}-peer-endpoints.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(endpoints))
        r.log(f"peer ({label}): enqueueing {n:,} jobs")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        enqueued = await helper(
            "enqueue", "--dsn", dsn, "--events", str(events), "--endpoints-file", str(path)
        )
        enqueue_s = loop.time() - t0
        path.unlink(missing_ok=True)
        if enqueued["enqueued"] != n:
            raise RuntimeError(f"enqueued {enqueued['enqueued']} of {n}")
        async with db.acquire() as conn:
            await conn.execute("ANALYZE")
        await sink.reset()
        args = ["consume", "--dsn", dsn, "--concurrency", str(config["concurrency"])]
        args += ["--batch-size", str(config["batch_size"]), "--driver", config["driver"]]
        proc = start_process(r, f"peer-{label}", ["-m", "benchmarks.peer_pgqueuer", *args])
        try:
            meter = CpuMeter({"peer": proc.pid, "sink": sink.proc.pid}, await postmaster_pid(db))
            meter.start()
            from tqdm import tqdm

            with tqdm(
                total=n,
                desc=f"peer ({label})",
                unit="job",
                leave=False,
                unit_scale=True,
                position=1,
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
            "jobs": n,
            "config": config,
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
        await drop_database(r, name)


async def run(r: Run) -> dict[str, Any]:
    drain = await r.require("drain")
    if drain.get("error"):
        raise RuntimeError("scenario 2 (drain) failed; nothing to compare with")
    sink = await r.shared_sink()
    n = drain["measured"]["deliveries"]
    tuned = await pgqueuer_drain(r, sink, n, TUNED, "tuned")
    r.log(f"peer: PgQueuer {tuned['rate']:,.0f} jobs/s (batch_size=100)")
    extra = None
    if not r.quick:
        extra = await pgqueuer_drain(r, sink, min(n, 20_000), DEFAULTS, "defaults")
        r.log(f"peer: PgQueuer {extra['rate']:,.0f} jobs/s (batch_size=10, its default)")
    value = drain["measured"]["value"]
    baseline = tuned["rate"]
    share = value / baseline
    return {
        "title": TITLE,
        "parameters": {
            "jobs": n,
            "pgqueuer": __import__("pgqueuer").__version__,
            "consumer": TUNED,
            "what_it_does": "one job per delivery; sign + POST with one aiohttp session; "
            "PgQueuer logs completion in batches (no delivery row, no per-endpoint limit)",
        },
        "measured": {"value": value, "unit": "deliveries/s", "name": "dispatcher (scenario 2)"},
        "baseline": {"name": "PgQueuer + aiohttp", "value": baseline, "unit": "jobs/s", **tuned},
        "pgqueuer_defaults": extra,
        "ratio": share,
        "target": {"text": "≥ 3x PgQueuer", "op": ">=", "value": TARGET},
        "met": share >= TARGET,
        "notes": [
            "CPU per delivery (µs): dispatcher "
            + ", ".join(f"{k} {v}" for k, v in drain["measured"]["cpu_us_per_delivery"].items())
            + "; PgQueuer "
            + ", ".join(f"{k} {v}" for k, v in tuned["cpu_us_per_job"].items())
        ]
        + (
            [f"PgQueuer with its default batch_size=10: {extra['rate']:,.0f} jobs/s"]
            if extra
            else []
        ),
        "summary": {
            "measured": f"dispatcher {value:,.0f} deliveries/s",
            "baseline": f"PgQueuer {baseline:,.0f} jobs/s (N={n:,})",
            "ratio": f"{share:.2f}x",
        },
    }
