"""A bare aiohttp client, run as its own process: the physical limit for one process.

    python -m benchmarks.client --url URL --requests N --concurrency C      # as fast as it can
    python -m benchmarks.client --url URL --rate R --duration S             # paced, latencies

No database, no signing: the same body and the same set of headers as a real delivery
(precomputed), one pooled `ClientSession` on uvloop, C coroutines each sending back to back.
Prints one JSON object on stdout: requests, errors, seconds, rps (and latency percentiles in
paced mode). Loopback only; every loop is bounded by a count and a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import aiohttp
import orjson

BODY = orjson.dumps(
    {
        "id": "EV" + "0" * 32,
        "type": "contact.updated",
        "apiVersion": "2026-11-01",
        "createdAt": "2026-01-01T00:00:00.000Z",
        "data": {"id": "CT1"},
    }
)
HEADERS = {
    "Content-Type": "application/json",
    "User-Agent": "dispatcher/0.1.0",
    "webhook-id": "WD" + "0" * 32,
    "webhook-timestamp": "1767225600",
    "webhook-signature": "v1," + "A" * 43 + "=",
}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def session(limit: int, timeout: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0),
        timeout=aiohttp.ClientTimeout(total=timeout),
        trust_env=False,
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
    )


async def flat_out(url: str, requests: int, concurrency: int, deadline_s: float) -> dict[str, Any]:
    remaining = requests
    errors = 0
    done = 0
    async with session(concurrency, 30.0) as client:
        # Warm the pool (one request per connection) so that connecting is not timed.
        async def warm() -> None:
            async with client.post(url, data=BODY, headers=HEADERS) as response:
                await response.read()

        await asyncio.wait_for(asyncio.gather(*(warm() for _ in range(concurrency))), 30.0)
        started = time.perf_counter()
        deadline = started + deadline_s

        async def one_worker() -> None:
            nonlocal remaining, errors, done
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                try:
                    async with client.post(url, data=BODY, headers=HEADERS) as response:
                        await response.read()
                        if response.status >= 300:
                            errors += 1
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1
                done += 1

        await asyncio.gather(*(one_worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return {
        "mode": "flat_out",
        "requests": done,
        "errors": errors,
        "seconds": seconds,
        "rps": done / seconds if seconds > 0 else 0.0,
        "concurrency": concurrency,
    }


async def paced(url: str, rate: float, duration: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    total = int(rate * duration)
    async with session(1000, 10.0) as client:

        async def one(i: int) -> None:
            nonlocal errors
            started = time.perf_counter()
            try:
                async with client.post(url, data=BODY, headers=HEADERS) as response:
                    await response.read()
                    if response.status >= 300:
                        errors += 1
            except (aiohttp.ClientError, TimeoutError):
                errors += 1
                return
            latencies.append(time.perf_counter() - started)

        tasks = []
        started = time.perf_counter()
        for i in range(total):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30.0)
        seconds = time.perf_counter() - started
    ms = [x * 1000 for x in latencies]
    return {
        "mode": "paced",
        "requests": total,
        "errors": errors,
        "seconds": seconds,
        "rps": total / seconds if seconds > 0 else 0.0,
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms, default=0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds, flat-out mode")
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s (paced mode)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds (paced mode)")
    args = parser.parse_args()
    if not args.url.startswith("http://127.0.0.1:"):
        raise SystemExit("benchmarks.client: loopback (http://127.0.0.1:PORT/...) only")
    if args.rate > 0:
        coro = paced(args.url, args.rate, args.duration)
    else:
        coro = flat_out(args.url, args.requests, args.concurrency, args.deadline)
    import uvloop

    print(orjson.dumps(uvloop.run(coro)).decode(), flush=True)


if __name__ == "__main__":
    main()
