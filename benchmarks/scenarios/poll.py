"""17. Poll: pull delivery (issue 26, item 2), `GET /v1/webhooks/{id}/poll` through the API.

On a database created for the run, one `dispatcher serve` (engine off: a poll webhook has no
deliveries, nothing for an engine to do), a workspace, a key made by `dispatcher keys create`
and one poll webhook (POST /v1/webhooks, `"mode": "poll"`).

- The floor, for scale: GET /v1/me (the API's cheapest keyed request) FLOOR_REQUESTS times,
  one after the other: what any request costs on this machine, in this run.
- Throughput: EVENTS events published through `dispatcher_publish_event` (2,000 a
  statement), then read back by one consumer, pages of PAGE, one request after the other
  (aiohttp, keep-alive) from the iterator it took before they were published, until `done`:
  events/s over the whole read, every event once (checked by id).
- Latency while publishing: `benchmarks.client` (its own process) POSTs /v1/events at
  PUBLISH_RATE a second to the same serve for PUBLISH_S seconds while the consumer polls
  (pages of PAGE, 10 ms pause after a `done` page): each poll's latency, p50/p99, and every
  published event polled once.

Targets (issue 26): ≥ 20,000 events/s polled; poll p99 < 50 ms while 1,000 events/s are
published.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson

from benchmarks.common import (
    Run,
    create_api_key,
    create_workspace,
    fresh_database,
    percentile,
    publish_events,
    run_client,
    start_serve,
    stop_process,
)

FLOOR_REQUESTS = 500
NAME = "poll"
TITLE = "17. Poll (pull delivery: 100,000 events in pages of 100; poll latency while publishing)"
EVENTS = 100_000
PAGE = 100
PUBLISH_RATE = 1000.0
TARGET_RATE = 20_000.0
TARGET_P99_MS = 50.0
TARGET_TEXT = (
    f"≥ {TARGET_RATE:,.0f} events/s polled (pages of {PAGE}); poll p99 < {TARGET_P99_MS:g} ms "
    f"while {PUBLISH_RATE:,.0f} events/s are published"
)


class Refused(Exception):
    """503 overloaded: the serve process had its bound of requests in progress."""


async def poll_once(
    session: aiohttp.ClientSession, url: str, iterator: str | None
) -> tuple[dict[str, Any], float]:
    params = {"limit": str(PAGE), **({"iterator": iterator} if iterator else {})}
    started = time.perf_counter()
    async with session.get(url, params=params) as response:
        body = await response.read()
        if response.status == 503:
            raise Refused()
        if response.status != 200:
            raise RuntimeError(f"poll answered {response.status}: {body[:300]!r}")
    return orjson.loads(body), (time.perf_counter() - started) * 1000


async def run(r: Run) -> dict[str, Any]:
    events = max(1000, int((10_000 if r.quick else EVENTS) * r.scale))
    publish_s = 10.0 if r.quick else 30.0
    serve = None
    try:
        async with fresh_database(r, NAME, pool_size=4) as (db, url):
            workspace = await create_workspace(db)
            key = await create_api_key(
                url, workspace, ["events:write", "webhooks:write", "webhooks:poll"]
            )
            serve, base = await start_serve(r, url, name="poll-serve", engine="off")
            headers = {"Authorization": f"Bearer {key}"}
            async with aiohttp.ClientSession(headers=headers, trust_env=False) as session:
                async with session.post(
                    f"{base}/v1/webhooks", json={"mode": "poll", "events": ["contact.updated"]}
                ) as made:
                    hook = await made.json()
                    if made.status != 201:
                        raise RuntimeError(f"create answered {made.status}: {hook}")
                poll_url = f"{base}/v1/webhooks/{hook['id']}/poll"
                start, _ = await poll_once(session, poll_url, None)
                r.log(f"poll: publishing {events:,} events")
                await publish_events(r, db, workspace, events, desc="publish")

                # The floor, in the same run: the API's cheapest keyed request (GET /v1/me, one
                # key lookup, no statement), one after the other, as the consumer polls.
                floor: list[float] = []
                for _ in range(FLOOR_REQUESTS):
                    began = time.perf_counter()
                    async with session.get(f"{base}/v1/me") as response:
                        await response.read()
                    floor.append((time.perf_counter() - began) * 1000)

                # Throughput: every event, page by page, one consumer.
                iterator, polls = start["iterator"], 0
                seen: set[str] = set()
                latencies: list[float] = []
                began = time.perf_counter()
                for _ in range(events // PAGE + 100):
                    page, ms = await poll_once(session, poll_url, iterator)
                    polls += 1
                    latencies.append(ms)
                    seen.update(event["id"] for event in page["data"])
                    iterator = page["iterator"]
                    if page["done"] and len(seen) >= events:
                        break
                wall = time.perf_counter() - began
                rate = len(seen) / wall
                r.log(f"poll: {len(seen):,} events in {wall:.2f} s: {rate:,.0f} events/s")
                if len(seen) != events:
                    raise RuntimeError(f"polled {len(seen)} distinct events of {events}")
                read = {
                    "events": len(seen),
                    "polls": polls,
                    "seconds": round(wall, 3),
                    "events_per_s": round(rate),
                    "poll_ms_p50": round(percentile(latencies, 50), 2),
                    "poll_ms_p99": round(percentile(latencies, 99), 2),
                    "floor_get_me_ms_p50": round(percentile(floor, 50), 2),
                    "floor_get_me_ms_p99": round(percentile(floor, 99), 2),
                }

                # Latency while publishing.
                paced = ["--url", f"{base}/v1/events", "--kind", "events", "--key", key]
                paced += ["--rate", str(PUBLISH_RATE), "--duration", str(publish_s)]
                paced += ["--id-prefix", "LIVE", "--concurrency", "100"]
                publisher = asyncio.create_task(run_client(*paced, within=publish_s + 120))
                live: list[float] = []
                taken: list[str] = []
                refused = 0
                while not publisher.done():
                    try:
                        page, ms = await poll_once(session, poll_url, iterator)
                    except Refused:  # counted, retried after a consumer's pause
                        refused += 1
                        await asyncio.sleep(0.05)
                        continue
                    live.append(ms)
                    taken.extend(event["id"] for event in page["data"])
                    iterator = page["iterator"]
                    if page["done"]:
                        await asyncio.sleep(0.01)  # a consumer's pause, not synchronisation
                published = await publisher
                async with db.acquire() as conn:  # what was stored, whatever the client saw
                    stored = (
                        await conn.fetchval(
                            "SELECT count(*) FROM events WHERE workspace_id = $1", workspace
                        )
                        - events
                    )
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # the last events published
                    try:
                        page, _ = await poll_once(session, poll_url, iterator)
                    except Refused:
                        await asyncio.sleep(0.05)
                        continue
                    taken.extend(event["id"] for event in page["data"])
                    iterator = page["iterator"]
                    if page["done"] and len(taken) >= stored:
                        break
                    await asyncio.sleep(0.01)
            p50, p99 = percentile(live, 50), percentile(live, 99)
            r.log(
                f"poll: while publishing {published['rps']:.0f}/s: poll p50 {p50:.1f} ms, "
                f"p99 {p99:.1f} ms ({len(live)} polls, {refused} refused); "
                f"{len(taken)} of {stored} taken"
            )
            during = {
                "publish_rate_per_s": PUBLISH_RATE,
                "published_rps": published["rps"],
                "published_ok": published["ok"],
                "publish_p99_ms": published["p99_ms"],
                "polls": len(live),
                "polls_refused_503": refused,
                "poll_ms_p50": round(p50, 2),
                "poll_ms_p99": round(p99, 2),
                "poll_ms_max": round(max(live), 2) if live else None,
                "events_stored": stored,
                "events_taken": len(taken),
                "events_taken_distinct": len(set(taken)),
            }
    finally:
        if serve is not None:
            await stop_process(r, serve)
    met = (
        read["events_per_s"] >= TARGET_RATE
        and p99 < TARGET_P99_MS
        and during["events_taken_distinct"] == during["events_taken"] == stored
        and refused == 0
    )
    return {
        "title": TITLE,
        "page": PAGE,
        "read": read,
        "while_publishing": during,
        "target": {"text": TARGET_TEXT, "events_per_s": TARGET_RATE, "p99_ms": TARGET_P99_MS},
        "met": met,
        "summary": {
            "measured": (
                f"{read['events_per_s']:,} events/s; poll p99 {p99:.1f} ms at "
                f"{published['rps']:.0f} published/s"
            ),
            "baseline": "—",
            "ratio": "—",
        },
    }
