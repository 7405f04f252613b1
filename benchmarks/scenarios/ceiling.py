"""1. Ceiling: raw aiohttp client requests/s from one process to the sink, no database.

The client (benchmarks/client.py, its own process, uvloop, one pooled session) sends the same
body and headers as a delivery, back to back from C coroutines. It is run at a few values of C
and the best is the ceiling: the physical limit of one Python process on this machine, the
figure the drain is divided by.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson

from benchmarks.common import REPO, Run, Sink

NAME = "ceiling"
TITLE = "1. Ceiling (raw aiohttp → sink)"


async def client(sink: Sink, requests: int, concurrency: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.client",
        "--url",
        sink.url("/ceiling"),
        "--requests",
        str(requests),
        "--concurrency",
        str(concurrency),
        "--deadline",
        "120",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"client failed: {err.decode(errors='replace')[-2000:]}")
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


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
        r.log(f"ceiling: C={concurrency}: {result['rps']:.0f} req/s ({result['errors']} errors)")
    best = max(runs, key=lambda x: x["rps"])
    if best["errors"]:
        raise RuntimeError(f"ceiling run had {best['errors']} errors")
    return {
        "title": TITLE,
        "parameters": {"requests_per_level": requests, "concurrency_levels": levels},
        "measured": {"value": best["rps"], "unit": "req/s", "concurrency": best["concurrency"]},
        "baseline": {"name": "itself (the reference of scenarios 2 and 8)", "value": best["rps"]},
        "ratio": 1.0,
        "target": {"text": "reference (no target)", "op": None, "value": None},
        "met": None,
        "runs": runs,
        "summary": {
            "measured": f"{best['rps']:,.0f} req/s (C={best['concurrency']})",
            "baseline": "—",
            "ratio": "1.00 (reference)",
        },
    }
