"""1. Ceiling: raw aiohttp client requests/s from one process to the sink, no database.

The client (benchmarks/client.py, its own process, uvloop, one pooled session) sends the same
body and headers as a delivery, back to back from C coroutines. It is run at a few values of C
and the best is the ceiling: the physical limit of one Python process on this machine, the
figure the drain is divided by. The client also reports the CPU it used per request at that
level (its own process time over the timed window): the bare client's CPU per request, which
scenario `cpu` sets the worker's CPU per delivery against.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Run, Sink, run_client

NAME = "ceiling"
TITLE = "1. Ceiling (raw aiohttp → sink)"


async def client(sink: Sink, requests: int, concurrency: int) -> dict[str, Any]:
    args = ["--url", sink.url("/ceiling"), "--requests", str(requests)]
    args += ["--concurrency", str(concurrency), "--deadline", "120"]
    return await run_client(*args, within=180)


async def run(r: Run) -> dict[str, Any]:
    sink = await r.shared_sink()
    requests = r.size(30_000, 5_000)
    levels = [50, 200, 1000]
    runs = []
    for concurrency in levels:
        await sink.reset()
        result = await client(sink, requests, concurrency)
        stats = await sink.stats()
        result["sink_count"] = stats["count"]
        runs.append(result)
        r.log(
            f"ceiling: C={concurrency}: {result['rps']:.0f} req/s ({result['errors']} errors, "
            f"client CPU {result['cpu_us_per_request']} µs/request)"
        )
    best = max(runs, key=lambda x: x["rps"])
    if best["errors"]:
        raise RuntimeError(f"ceiling run had {best['errors']} errors")
    return {
        "title": TITLE,
        "parameters": {"requests_per_level": requests, "concurrency_levels": levels},
        "measured": {
            "value": best["rps"],
            "unit": "req/s",
            "concurrency": best["concurrency"],
            "client_cpu_us_per_request": best["cpu_us_per_request"],
            "p50_ms": best["p50_ms"],
            "p99_ms": best["p99_ms"],
        },
        "baseline": {"name": "itself (the reference of scenarios 2 and 4)", "value": best["rps"]},
        "ratio": 1.0,
        "target": {"text": "reference (no target)", "op": None, "value": None},
        "met": None,
        "runs": runs,
        "notes": [
            f"bare client CPU per request at C={best['concurrency']}: "
            f"{best['cpu_us_per_request']} µs (its own process time over the timed window)"
        ],
        "summary": {
            "measured": f"{best['rps']:,.0f} req/s (C={best['concurrency']}), "
            f"client {best['cpu_us_per_request']:.0f} µs CPU/request",
            "baseline": "—",
            "ratio": "1.00 (reference)",
        },
    }
