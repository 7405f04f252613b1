"""What a real scrape of /metrics shows from the start and under a backlog: series declared
at 0, lag buckets between minutes and an hour, what waits for its endpoint apart from what no
engine claims, one definition of ready, the per-webhook series bounded and freed, and a scrape
that never stops the event loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from dispatcher import metrics, monitor
from dispatcher.domain.clock import SystemClock
from dispatcher.domain.events import PUBLISHABLE_TYPES
from dispatcher.errors import ConfigurationError
from dispatcher.settings import Settings
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import publish, subscribe, wait_recorded
from tests.observability.prometheus import sample, scrape
from tests.receiver import EngineFactory, Receiver

# A fresh process serves /metrics (as DISPATCHER_METRICS_PORT does) and scrapes it once.
FRESH_SCRAPE = """
import asyncio
from aiohttp import ClientSession, web
from dispatcher import service
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.api.metrics import metrics_only_app
from dispatcher.domain.clock import SystemClock
from dispatcher.settings import Settings
from dispatcher.store.database import Database

async def main():
    service.declare_metrics()
    # The API app as serve makes it (no database is reached to make it).
    create_app(Services(Database("postgresql://127.0.0.1:9/none"), Settings(), SystemClock(), b"k"))
    runner = web.AppRunner(metrics_only_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            print(await resp.text())
    await runner.cleanup()

asyncio.run(main())
"""


def series(text: str, name: str) -> set[tuple[tuple[str, str], ...]]:
    """The label sets of `name`'s samples in a scrape."""
    return {
        tuple(sorted(s.labels.items()))
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_series_known_in_advance_exist_at_zero_in_the_first_scrape() -> None:
    """Before anything happened: every outcome and status class an attempt can have, every
    type each source publishes, every reason a backlog is held; all at 0. (`increase()` cannot
    see a series' first increment, so a burst right after a start was undercounted.)"""
    done = subprocess.run(
        [sys.executable, "-c", FRESH_SCRAPE], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = done.stdout
    attempts = series(text, "dispatcher_delivery_attempts_total")
    for outcome, classes in metrics.OUTCOME_STATUS_CLASSES.items():
        for status_class in classes:
            labels = (("outcome", outcome), ("status_class", status_class))
            assert labels in attempts, labels
            assert sample(text, "dispatcher_delivery_attempts_total", outcome=outcome,
                          status_class=status_class) == 0  # fmt: skip
    published = series(text, "dispatcher_events_published_total")
    for event_type in PUBLISHABLE_TYPES:
        assert (("source", "api"), ("type", event_type)) in published, event_type
    for source, event_type in (("inbound", "message.received"), ("inbound", "call.missed"),
                               ("carrier", "message.delivered"), ("test", "webhook.test"),
                               ("service", "delivery.exhausted")):  # fmt: skip
        assert (("source", source), ("type", event_type)) in published, (source, event_type)
    assert sample(text, "dispatcher_events_published_total") == 0
    requests = series(text, "dispatcher_http_requests_total")
    for route, method, status in (("/v1/events", "POST", "202"),
                                  ("/v1/webhooks/{webhook_id}", "GET", "200"),
                                  ("/v1/webhooks/{webhook_id}", "DELETE", "204")):  # fmt: skip
        assert (("method", method), ("route", route), ("status", status)) in requests, route
    assert sample(text, "dispatcher_http_requests_total") == 0
    held = series(text, "dispatcher_queue_held_deliveries")
    assert held == {(("reason", r),) for r in ("rate_limit", "concurrency", "fifo")}


async def test_a_lag_of_minutes_lands_in_its_own_bucket(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database, clock: FakeClock,
) -> None:  # fmt: skip
    """A delivery attempted 815 s after it was due counts in the 900 s bucket, not only in
    3,600 s: a p99 of such lags reads ~15 minutes, not an hour."""
    await subscribe(client, ws, receiver.url())
    await publish(client, ws)
    before = await scrape(client)
    for le in ("600.0", "900.0", "1800.0"):
        assert ("le", le) in {lab for s in series(before, "dispatcher_delivery_lag_seconds_bucket")
                              for lab in s}, le  # fmt: skip
    clock.advance(815)
    await make_engine()
    await wait_recorded(db, 1)
    after = ""

    async def observed() -> bool:
        nonlocal after
        after = await scrape(client)
        name = "dispatcher_delivery_lag_seconds_count"
        return sample(after, name) > sample(before, name)

    await wait_for(observed)

    def moved(le: str) -> float:
        name = "dispatcher_delivery_lag_seconds_bucket"
        return sample(after, name, le=le) - sample(before, name, le=le)

    assert (moved("600.0"), moved("900.0"), moved("1800.0"), moved("3600.0")) == (0, 1, 1, 1)


# -- What waits for its endpoint, apart from what no engine claims --------------------------


async def gauges(client: TestClient[Any, Any], db: Database) -> dict[str, float]:
    await monitor.refresh_once(db, SystemClock(), lambda: True)
    text = await scrape(client)
    found = {
        reason: sample(text, "dispatcher_queue_held_deliveries", reason=reason)
        for reason in metrics.HELD_REASONS
    }
    found["due"] = sample(text, "dispatcher_queue_due_deliveries")
    found["oldest_due"] = sample(text, "dispatcher_queue_oldest_due_age_seconds")
    found["oldest_unclaimed"] = sample(text, "dispatcher_queue_oldest_unclaimed_age_seconds")
    return found


async def test_a_rate_limited_backlog_waits_for_its_endpoint_not_for_an_engine(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    """Drained at 1 request a second by a healthy engine, the backlog grows old, but it is
    held by the rate limit: what no engine claims stays at 0 s, so the alert stays quiet.
    Once no engine takes from the bucket, the same backlog is what no engine claims."""
    await subscribe(client, ws, receiver.url(), rateLimit=1)
    for n in range(12):
        await publish(client, ws, f"CT{n}")
    engine = await make_engine()
    await wait_for(lambda: len(receiver.requests) >= 2, message="two sends at the rate")
    seen: dict[str, float] = {}

    async def old_and_held() -> bool:
        seen.update(await gauges(client, db))
        return seen["oldest_due"] >= 2.5 and seen["rate_limit"] >= 5

    await wait_for(old_and_held, within=30, interval=0.2, message="a backlog 2.5 s old, held")
    assert seen["oldest_unclaimed"] == 0, seen
    assert seen["concurrency"] == 0 and seen["fifo"] == 0, seen

    await engine.stop()  # nobody drains the bucket now

    async def unclaimed() -> bool:
        seen.update(await gauges(client, db))
        return seen["rate_limit"] == 0

    await wait_for(unclaimed, within=10, interval=0.2, message="the bucket left untouched")
    assert seen["oldest_unclaimed"] >= 2.5, seen


async def test_a_full_endpoint_and_a_lane_hold_their_backlog(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database,
) -> None:  # fmt: skip
    """Every slot of a hanging endpoint taken: its due backlog waits for it (concurrency);
    a fifo endpoint's events behind their lane's head wait for the head (fifo)."""
    receiver.behaviours["/full"] = receiver.hang
    receiver.behaviours["/lane"] = receiver.hang
    await subscribe(client, ws, receiver.url("/full"), maxConcurrency=1)
    await subscribe(client, ws, receiver.url("/lane"), ordering="fifo")
    for n in range(4):
        await publish(client, ws, f"CT{n}")
    await make_engine()
    await wait_for(lambda: receiver.in_flight.get("/full") == 1)
    await wait_for(lambda: receiver.in_flight.get("/lane") == 1)
    seen: dict[str, float] = {}

    async def held() -> bool:
        seen.update(await gauges(client, db))
        return seen["concurrency"] == 3 and seen["fifo"] == 3

    await wait_for(held, message="3 held by the concurrency limit, 3 behind the lane's head")
    assert seen["oldest_unclaimed"] == 0 and seen["rate_limit"] == 0, seen
    receiver.release.set()


# -- One definition of ready ------------------------------------------------------------------


async def test_a_long_lock_on_the_queue_leaves_the_process_ready(
    client: TestClient[Any, Any], db: Database, database_url: str
) -> None:
    """`dispatcher_ready` is what /readyz says: while another transaction holds the queue
    table locked, both say ready (the queue gauges wait; readiness does not)."""
    blocker = await asyncpg.connect(database_url)
    metrics.READY.set(0)
    refresh: asyncio.Task[bool] | None = None
    try:
        async with blocker.transaction():
            await blocker.execute("LOCK TABLE delivery_queue IN ACCESS EXCLUSIVE MODE")
            refresh = asyncio.create_task(monitor.refresh_once(db, SystemClock(), lambda: True))

            async def ready_in_the_scrape() -> bool:
                return sample(await scrape(client), "dispatcher_ready") == 1

            await wait_for(ready_in_the_scrape, message="dispatcher_ready 1 during the lock")
            assert not refresh.done()  # the queue's gauges are still waiting on the lock
            assert (await client.get("/readyz")).status == 200
    finally:
        await blocker.close()
        if refresh is not None:
            assert await asyncio.wait_for(refresh, timeout=30) is True


# -- The per-webhook series: bounded, freed, and a scrape off the event loop -----------------


@pytest.fixture
def webhook_series() -> Iterator[metrics.WebhookSeries]:
    series_ = metrics.WEBHOOK_SERIES
    series_.forget(series_.ids())
    metrics.WEBHOOK_ATTEMPTS.clear()
    yield series_
    series_.forget(series_.ids())
    metrics.WEBHOOK_ATTEMPTS.clear()


async def test_per_webhook_series_are_bounded_and_freed_with_their_webhook(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, make_engine: EngineFactory,
    db: Database, webhook_series: metrics.WebhookSeries,
) -> None:  # fmt: skip
    """DISPATCHER_METRICS_PER_WEBHOOK_LIMIT webhooks get a series of their own, the others
    share `webhook="_other"`; a deleted webhook's series goes at the next refresh, and its
    place is free again."""
    hooks = [await subscribe(client, ws, receiver.url(f"/h{n}")) for n in range(5)]
    await publish(client, ws, "CT1")
    await make_engine(metrics_per_webhook=True, metrics_per_webhook_limit=2)
    await wait_recorded(db, 5)
    text = ""

    async def counted() -> bool:
        nonlocal text
        text = await scrape(client)
        return sample(text, "dispatcher_webhook_delivery_attempts_total") == 5

    await wait_for(counted, message="5 attempts in the per-webhook series")
    labelled = {
        dict(s)["webhook"] for s in series(text, "dispatcher_webhook_delivery_attempts_total")
    }
    assert len(labelled) == 3 and metrics.OTHER_WEBHOOKS in labelled, labelled
    assert sample(text, "dispatcher_webhook_delivery_attempts_total", webhook="_other") == 3
    own = sorted(labelled - {metrics.OTHER_WEBHOOKS})
    assert set(own) <= {hook["id"] for hook in hooks}

    resp = await client.delete(f"/v1/webhooks/{own[0]}", headers=ws.headers)
    assert resp.status == 204
    await monitor.refresh_once(db, SystemClock(), lambda: True)
    text = await scrape(client)
    left = {dict(s)["webhook"] for s in series(text, "dispatcher_webhook_delivery_attempts_total")}
    assert own[0] not in left and own[1] in left, left
    assert webhook_series.ids() == [own[1]]


class SlowCollector:
    """A collector that takes 0.5 s to collect: as a scrape of very many series would."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.started.set()
        time.sleep(0.5)
        yield GaugeMetricFamily("test_slow_collector", "A collector that takes its time.", 1)


async def test_a_slow_scrape_never_stops_the_event_loop(client: TestClient[Any, Any]) -> None:
    """While a scrape is rendered, the same process keeps answering: the exposition is made
    in a worker thread, not in the event loop."""
    slow = SlowCollector()
    REGISTRY.register(slow)
    try:
        scraping = asyncio.create_task(client.get("/metrics"))
        await wait_for(slow.started.is_set, message="the scrape under way")
        started = time.perf_counter()
        assert (await client.get("/healthz")).status == 200
        took = time.perf_counter() - started
        resp = await scraping
        assert resp.status == 200 and "test_slow_collector 1.0" in await resp.text()
    finally:
        REGISTRY.unregister(slow)
    assert took < 0.3, f"/healthz waited {took:.2f}s behind a scrape"


def test_the_per_webhook_limit_is_validated() -> None:
    assert Settings().metrics_per_webhook_limit == 1000
    env = {"DISPATCHER_METRICS_PER_WEBHOOK_LIMIT": "50"}
    assert Settings.from_env(env).metrics_per_webhook_limit == 50
    for bad in ("0", "100001", "many"):
        with pytest.raises(ConfigurationError, match="DISPATCHER_METRICS_PER_WEBHOOK_LIMIT"):
            Settings.from_env({"DISPATCHER_METRICS_PER_WEBHOOK_LIMIT": bad})
