"""The peer baseline: the same drain built the obvious way with PgQueuer and aiohttp.

    python -m benchmarks.peer_pgqueuer install --dsn URL
    python -m benchmarks.peer_pgqueuer enqueue --dsn URL --events E --urls-file F
    python -m benchmarks.peer_pgqueuer consume --dsn URL [--concurrency C] [--batch-size B]
                                               [--driver connection|pool]

What a user would build instead of dispatcher, following PgQueuer's README: one job per
delivery (payload: the delivery id, the URL, the endpoint's secret and the event's body), a
`PgQueuer` on an asyncpg connection, one entrypoint that signs the body (the same Standard
Webhooks HMAC as dispatcher, `dispatcher.domain.signing.sign`) and POSTs it with one shared
aiohttp `ClientSession` (aiohttp's default pool: 100 connections); PgQueuer itself records each
job's completion (its log table) in batches. Run in drain mode: the process exits when the
queue is empty. `--concurrency 0` registers the entrypoint without a concurrency limit
(PgQueuer's default); `--batch-size` is `QueueManager.run(batch_size=...)`.

It does less than dispatcher: no per-endpoint concurrency limit, no delivery row to update,
no retry schedule (a failed POST is simply logged as an exception). That only flatters it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import time
import uuid
from datetime import timedelta
from typing import Any

import aiohttp
import asyncpg
import orjson

ENTRYPOINT = "deliver"


def envelope(n: int) -> bytes:
    """An event body shaped like dispatcher's (dispatcher_publish_event's envelope)."""
    created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return orjson.dumps(
        {
            "id": "EV" + uuid.uuid4().hex,
            "type": "contact.updated",
            "apiVersion": "2026-11-01",
            "createdAt": created,
            "data": {"id": f"CT{n}"},
        }
    )


async def install(dsn: str) -> None:
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def enqueue(dsn: str, events: int, endpoints: list[dict[str, str]], chunk: int) -> int:
    """One job per (event, endpoint), `chunk` jobs per batch insert; returns jobs enqueued."""
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    total = 0
    try:
        queries = Queries(AsyncpgDriver(conn))
        payloads: list[bytes | None] = []
        for n in range(1, events + 1):
            body = envelope(n).decode()
            for endpoint in endpoints:
                payloads.append(
                    orjson.dumps(
                        {
                            "id": "WD" + uuid.uuid4().hex,
                            "url": endpoint["url"],
                            "secret": endpoint["secret"],
                            "body": body,
                        }
                    )
                )
                if len(payloads) >= chunk:
                    await queries.enqueue(
                        [ENTRYPOINT] * len(payloads), payloads, [0] * len(payloads)
                    )
                    total += len(payloads)
                    payloads = []
        if payloads:
            await queries.enqueue([ENTRYPOINT] * len(payloads), payloads, [0] * len(payloads))
            total += len(payloads)
    finally:
        await conn.close()
    return total


async def consume(args: argparse.Namespace) -> dict[str, Any]:
    from pgqueuer import AsyncpgDriver, AsyncpgPoolDriver, Job, PgQueuer
    from pgqueuer.types import QueueExecutionMode

    from dispatcher.domain.signing import secret_key, sign

    pool = None
    conn = None
    if args.driver == "pool":
        pool = await asyncpg.create_pool(args.dsn, min_size=2, max_size=10)
        driver: Any = AsyncpgPoolDriver(pool)
    else:
        conn = await asyncpg.connect(args.dsn)
        driver = AsyncpgDriver(conn)
    pgq = PgQueuer(driver)
    connector = aiohttp.TCPConnector(limit=100, limit_per_host=0)  # aiohttp's defaults
    session = aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=args.timeout), trust_env=False
    )
    keys: dict[str, bytes] = {}
    counts = {"ok": 0, "failed": 0}

    async def deliver(job: Job) -> None:
        assert job.payload is not None
        delivery = orjson.loads(job.payload)
        secret = delivery["secret"]
        key = keys.get(secret)
        if key is None:
            key = keys[secret] = secret_key(secret)
        body = delivery["body"].encode()
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "webhook-id": delivery["id"],
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign([key], delivery["id"], timestamp, body),
        }
        async with session.post(delivery["url"], data=body, headers=headers) as response:
            await response.read()
            if response.status >= 300:
                counts["failed"] += 1
                raise RuntimeError(f"HTTP {response.status}")
        counts["ok"] += 1

    # Registered by a call, not as a decorator: the same thing, and mypy keeps its signature.
    pgq.entrypoint(ENTRYPOINT, concurrency_limit=args.concurrency)(deliver)
    started = time.perf_counter()
    try:
        await asyncio.wait_for(
            pgq.qm.run(
                batch_size=args.batch_size,
                mode=QueueExecutionMode.drain,
                max_concurrent_tasks=args.max_tasks or None,
                dequeue_timeout=timedelta(seconds=1),
            ),
            timeout=args.deadline,
        )
    finally:
        await session.close()
        if conn is not None:
            await conn.close()
        if pool is not None:
            await pool.close()
    return {**counts, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_pgqueuer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("install", "enqueue", "consume"):
        sub = commands.add_parser(name)
        sub.add_argument("--dsn", required=True)
        if name == "enqueue":
            sub.add_argument("--events", type=int, required=True)
            sub.add_argument("--endpoints-file", required=True, help="JSON [{url, secret}]")
            sub.add_argument("--chunk", type=int, default=2000)
        if name == "consume":
            sub.add_argument("--concurrency", type=int, default=0, help="0: no limit")
            sub.add_argument("--batch-size", type=int, default=10)
            sub.add_argument("--max-tasks", type=int, default=0)
            sub.add_argument("--driver", choices=("connection", "pool"), default="connection")
            sub.add_argument("--timeout", type=float, default=15.0)
            sub.add_argument("--deadline", type=float, default=1800.0)
    args = parser.parse_args()
    import uvloop

    if args.command == "install":
        uvloop.run(install(args.dsn))
        result: Any = {"installed": True}
    elif args.command == "enqueue":
        with open(args.endpoints_file, "rb") as f:
            endpoints = orjson.loads(f.read())
        result = {"enqueued": uvloop.run(enqueue(args.dsn, args.events, endpoints, args.chunk))}
    else:
        result = uvloop.run(consume(args))
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
