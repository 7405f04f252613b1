"""A bare aiohttp client, run as its own process: the physical limit for one process, and the
load generator of the API scenarios.

    python -m benchmarks.client --url URL --requests N --concurrency C      # as fast as it can
    python -m benchmarks.client --url URL --duration S --concurrency C      # ... for S seconds
    python -m benchmarks.client --url URL --rate R --duration S             # paced, latencies

    --kind sink      (default) the body and headers of a real delivery, precomputed, to the sink
    --kind events    POST /v1/events {"type": "contact.updated", "data": {"id": <prefix><i>}}
    --kind messages  POST /v1/messages {"from": --from, "to": one of 10,000 numbers, "text"}
    --key K1,K2,...  API keys (Authorization: Bearer), taken in turn (request i uses K[i % n])
    --times-file F   write [[data_id, sent_unix, answered_unix, status], ...] per request

No database, no signing: one pooled `ClientSession` on uvloop (at most C connections), C
coroutines each sending back to back (flat out), or one request started every 1/R s whatever
the answers do (paced: a slow server makes requests wait for a connection, and that wait is in
the latency). Latency is from just before the request is issued to its last byte. Prints one
JSON object on stdout: requests, ok, errors, by status, seconds, rps, latency percentiles, and
the CPU this process used over the timed window (`cpu_us_per_request`: the bare client's CPU
per request). Loopback only; every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Callable
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
CONTACTS = 10_000  # messages go to this many different numbers, in turn


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


Request = Callable[[int], tuple[str, bytes, dict[str, str]]]


def request_maker(args: argparse.Namespace) -> Request:
    """i -> (data id, body, headers) for request number i."""
    keys = [k for k in (args.key or "").split(",") if k]
    auth = [{"Content-Type": "application/json", "Authorization": f"Bearer {k}"} for k in keys]
    prefix = args.id_prefix
    if args.kind == "sink":
        return lambda i: ("", BODY, HEADERS)
    if not auth:
        raise SystemExit("benchmarks.client: --kind events|messages needs --key")
    if args.kind == "events":

        def event(i: int) -> tuple[str, bytes, dict[str, str]]:
            data_id = f"{prefix}{i}"
            body = b'{"type":"contact.updated","data":{"id":"' + data_id.encode() + b'"}}'
            return data_id, body, auth[i % len(auth)]

        return event
    sender = args.sender
    if not sender:
        raise SystemExit("benchmarks.client: --kind messages needs --from")

    def message(i: int) -> tuple[str, bytes, dict[str, str]]:
        data_id = f"{prefix}{i}"
        to = f"+1555{i % CONTACTS:07d}"
        body = orjson.dumps({"from": sender, "to": to, "text": f"bench {data_id}"})
        return data_id, body, auth[i % len(auth)]

    return message


class Tally:
    """What came back: latencies (ms), statuses, and per-request times when asked."""

    def __init__(self, keep_times: bool) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter[str] = Counter()
        self.errors = 0
        self.times: list[tuple[str, float, float, int]] | None = [] if keep_times else None

    async def send(self, client: aiohttp.ClientSession, url: str, request: Request, i: int) -> None:
        data_id, body, headers = request(i)
        sent = time.time() if self.times is not None else 0.0
        started = time.perf_counter()
        status = 0
        try:
            async with client.post(url, data=body, headers=headers) as response:
                await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.statuses[type(exc).__name__] += 1
            self.errors += 1
        else:
            self.statuses[str(status)] += 1
            if status >= 300:
                self.errors += 1
            else:
                self.latencies.append((time.perf_counter() - started) * 1000)
        if self.times is not None:
            self.times.append((data_id, sent, time.time(), status))

    def result(self, mode: str, requests: int, seconds: float, cpu: float) -> dict[str, Any]:
        ms = self.latencies
        return {
            "mode": mode,
            "requests": requests,
            "ok": requests - self.errors,
            "errors": self.errors,
            "by_status": dict(self.statuses),
            "seconds": seconds,
            "rps": requests / seconds if seconds > 0 else 0.0,
            "ok_rps": (requests - self.errors) / seconds if seconds > 0 else 0.0,
            "p50_ms": percentile(ms, 50),
            "p95_ms": percentile(ms, 95),
            "p99_ms": percentile(ms, 99),
            "max_ms": max(ms, default=0.0),
            "cpu_seconds": round(cpu, 3),
            "cpu_us_per_request": round(cpu / requests * 1e6, 1) if requests else None,
        }


async def warm_up(client: aiohttp.ClientSession, url: str, request: Request, n: int) -> None:
    """One request per connection so that connecting is not timed (numbered below 0)."""
    if n <= 0:
        return

    async def one(i: int) -> None:
        _, body, headers = request(i)
        async with client.post(url, data=body, headers=headers) as response:
            await response.read()

    await asyncio.wait_for(asyncio.gather(*(one(-1 - i) for i in range(n))), 30.0)


async def flat_out(
    url: str, request: Request, requests: int, duration: float, concurrency: int, tally: Tally
) -> dict[str, Any]:
    """C coroutines back to back until `requests` are sent or `duration` has passed."""
    remaining = requests if requests > 0 else 1 << 62
    done = 0
    async with session(concurrency, 30.0) as client:
        await warm_up(client, url, request, concurrency)
        cpu0 = time.process_time()
        started = time.perf_counter()
        deadline = started + duration

        async def one_worker() -> None:
            nonlocal remaining, done
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                i = done
                done += 1
                await tally.send(client, url, request, i)

        await asyncio.gather(*(one_worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
    return {**tally.result("flat_out", done, seconds, cpu), "concurrency": concurrency}


async def paced(
    url: str,
    request: Request,
    rate: float,
    duration: float,
    concurrency: int,
    warm: int,
    tally: Tally,
) -> dict[str, Any]:
    """One request every 1/rate s for `duration` s, over at most `concurrency` connections."""
    total = int(rate * duration)
    lag_ms: list[float] = []
    async with session(concurrency, 10.0) as client:
        await warm_up(client, url, request, min(warm, concurrency))
        tasks = []
        cpu0 = time.process_time()
        started = time.perf_counter()
        for i in range(total):
            due = started + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            lag_ms.append(max(0.0, (time.perf_counter() - due) * 1000))
            tasks.append(asyncio.create_task(tally.send(client, url, request, i)))
        sent_seconds = time.perf_counter() - started
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60.0)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
    return {
        **tally.result("paced", total, seconds, cpu),
        "rate": rate,
        "concurrency": concurrency,
        "send_rate_achieved": total / sent_seconds if sent_seconds > 0 else 0.0,
        "schedule_lag_ms_p99": percentile(lag_ms, 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--kind", choices=("sink", "events", "messages"), default="sink")
    parser.add_argument("--key", default=None, help="API key(s), comma-separated")
    parser.add_argument("--from", dest="sender", default=None, help="messages: the sender")
    parser.add_argument("--id-prefix", default="B", help="events and messages: data ids")
    parser.add_argument("--requests", type=int, default=0, help="flat out: stop after N")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds, flat-out mode")
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s (paced mode)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds")
    parser.add_argument("--warm", type=int, default=0, help="paced: warm-up requests first")
    parser.add_argument("--times-file", default=None)
    args = parser.parse_args()
    if not args.url.startswith("http://127.0.0.1:"):
        raise SystemExit("benchmarks.client: loopback (http://127.0.0.1:PORT/...) only")
    request = request_maker(args)
    tally = Tally(keep_times=args.times_file is not None)
    if args.rate > 0:
        coro = paced(
            args.url, request, args.rate, args.duration, args.concurrency, args.warm, tally
        )
    else:
        # Flat out: N requests (bounded by --deadline), or for --duration seconds.
        duration = args.deadline if args.requests > 0 else min(args.duration, args.deadline)
        coro = flat_out(args.url, request, args.requests, duration, args.concurrency, tally)
    import uvloop

    result = uvloop.run(coro)
    if args.times_file and tally.times is not None:
        with open(args.times_file, "wb") as f:
            f.write(orjson.dumps(tally.times))
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
