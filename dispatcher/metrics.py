"""Every Prometheus metric, defined once. Imports nothing from the package.

Names follow Prometheus conventions: `dispatcher_` prefix, base units, `_total` counters,
`_seconds` durations. Labels have bounded cardinality: no delivery ids, no URLs; the one
per-webhook series is only written when DISPATCHER_METRICS_PER_WEBHOOK is on, for at most
DISPATCHER_METRICS_PER_WEBHOOK_LIMIT webhooks (WebhookSeries).

Every label value known in advance is declared, so that its series exists at 0 from the first
scrape (`rate()` and `increase()` see nothing of a series' first increment): the fixed ones
here at import, the event types by `declare_published` at start-up (this module imports
nothing from the package, so the catalog is handed to it).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from dispatcher.domain.enums import HeldReason

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Lags of minutes (a backlog, a retry due long ago) are told apart up to an hour: p99 of a
# worst lag of 815 s must not read as the next bucket's 3,600 s.
LAG_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
    900, 1800, 3600,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)

# Delivery attempts
ATTEMPTS = Counter(
    "dispatcher_delivery_attempts_total",
    "Delivery attempts by outcome (success, http_error, timeout, connection_error, blocked) "
    "and HTTP status class (2xx..5xx, or none when nothing answered).",
    ["outcome", "status_class"],
)
WEBHOOK_ATTEMPTS = Counter(
    "dispatcher_webhook_delivery_attempts_total",
    "Delivery attempts per webhook and outcome (only with DISPATCHER_METRICS_PER_WEBHOOK=on; "
    'webhooks beyond DISPATCHER_METRICS_PER_WEBHOOK_LIMIT are counted as webhook="_other").',
    ["webhook", "outcome"],
)
ATTEMPT_DURATION = Histogram(
    "dispatcher_delivery_attempt_duration_seconds",
    "Duration of one attempt, connect to last byte read.",
    ["outcome"],
    buckets=LATENCY_BUCKETS,
)
LAG = Histogram(
    "dispatcher_delivery_lag_seconds",
    "Time from a delivery being due to its attempt starting.",
    buckets=LAG_BUCKETS,
)
END_TO_END = Histogram(
    "dispatcher_delivery_end_to_end_seconds",
    "Time from event creation to successful delivery.",
    buckets=LAG_BUCKETS,
)
GIVEN_UP = Counter(
    "dispatcher_deliveries_given_up_total",
    "Deliveries given up by the engine (exhausted retries, 410 Gone, or a retry given up "
    "because its webhook was disabled or deleted, or its event expunged, during the attempt).",
    ["reason"],
)
WEBHOOKS_DISABLED = Counter(
    "dispatcher_webhooks_disabled_total",
    "Webhooks disabled by the engine, by reason (failing, gone).",
    ["reason"],
)
IN_FLIGHT = Gauge("dispatcher_delivery_requests_in_flight", "Delivery requests in flight now.")
AT_LIMIT = Gauge(
    "dispatcher_webhooks_at_concurrency_limit",
    "Webhooks whose in-flight requests (in this process) are at their concurrency limit.",
)

# Events and fan-out
EVENTS_PUBLISHED = Counter(
    "dispatcher_events_published_total",
    "Events stored by this process, by source (api, inbound, carrier, test) and type.",
    ["source", "type"],
)
FANNED_OUT = Counter(
    "dispatcher_deliveries_fanned_out_total", "Deliveries created by fan-out in this process."
)
PUBLISH_BATCH_SIZE = Histogram(
    "dispatcher_publish_batch_size",
    "POST /v1/events publishes stored per shared statement and commit (store/publish_batcher.py).",
    buckets=BATCH_BUCKETS,
)

# Queue
QUEUE_DUE = Gauge("dispatcher_queue_due_deliveries", "Deliveries due now and not claimed.")
QUEUE_OLDEST_AGE = Gauge(
    "dispatcher_queue_oldest_due_age_seconds", "Age of the oldest due, unclaimed delivery."
)
QUEUE_HELD = Gauge(
    "dispatcher_queue_held_deliveries",
    "Deliveries that wait for their endpoint, not for an engine, by reason: rate_limit (due; "
    "its rate limit's bucket is being drained), concurrency (due; every slot of the endpoint "
    "is taken), fifo (waiting for the head of its ordering lane to settle).",
    ["reason"],
)
QUEUE_OLDEST_UNCLAIMED_AGE = Gauge(
    "dispatcher_queue_oldest_unclaimed_age_seconds",
    "Age of the oldest due delivery that nothing but an engine holds back (its endpoint has "
    "room): what no engine claims.",
)
CLAIM_BATCH = Histogram(
    "dispatcher_claim_batch_size", "Deliveries claimed per claim statement.", buckets=BATCH_BUCKETS
)
CLAIM_DURATION = Histogram(
    "dispatcher_claim_duration_seconds", "Duration of the claim statement.", buckets=LATENCY_BUCKETS
)
RECORD_BATCH = Histogram(
    "dispatcher_record_batch_size", "Results written per record flush.", buckets=BATCH_BUCKETS
)
RECORD_DURATION = Histogram(
    "dispatcher_record_duration_seconds",
    "Duration of one record flush (one transaction).",
    buckets=LATENCY_BUCKETS,
)
ENGINE_LAST_CLAIM = Gauge(
    "dispatcher_engine_last_claim_timestamp_seconds",
    "Unix time of the engine's last claim statement (successful or empty).",
)
ENGINE_RUNNING = Gauge("dispatcher_engine_running", "1 while the engine loop runs.")
READY = Gauge(
    "dispatcher_ready",
    "1 when the process's periodic readiness self-check passed: what GET /readyz answers 200 "
    "to (database, schema, engine, background tasks).",
)
DB_POOL_IN_USE = Gauge("dispatcher_db_pool_connections_in_use", "Pool connections in use.")
DB_POOL_SIZE = Gauge("dispatcher_db_pool_connections", "Pool connections open.")

# API
HTTP_REQUESTS = Counter(
    "dispatcher_http_requests_total",
    "API requests by route template, method and status.",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "dispatcher_http_request_duration_seconds",
    "API request latency by route template and method.",
    ["route", "method"],
    buckets=LATENCY_BUCKETS,
)
API_OVERLOADED = Counter(
    "dispatcher_api_overloaded_total",
    "API requests refused with 503 overloaded, by reason: requests (the bound on requests in "
    "progress, DISPATCHER_MAX_REQUESTS_IN_PROGRESS), pool (no database connection came free "
    "within DISPATCHER_POOL_ACQUIRE_TIMEOUT) or timeout (a statement ran past its time limit: "
    "a filter test, a publish's payload filters; docs/api.md, Bounds).",
    ["reason"],
)
API_REQUESTS_IN_PROGRESS = Gauge(
    "dispatcher_api_requests_in_progress",
    "API requests in progress now, counted against DISPATCHER_MAX_REQUESTS_IN_PROGRESS "
    "(the probes and /metrics are not counted).",
)

API_CONNECTIONS_OPEN = Gauge(
    "dispatcher_api_connections_open",
    "Client connections open on the API port now (bounded by DISPATCHER_MAX_CONNECTIONS).",
)
API_CONNECTIONS_CLOSED = Counter(
    "dispatcher_api_connections_closed_total",
    "Client connections the API closed on its own, by reason: head_timeout (no complete "
    "request head within DISPATCHER_HEAD_TIMEOUT), body_timeout (DISPATCHER_BODY_TIMEOUT), "
    "evicted (the one waiting longest for a head, to make room past DISPATCHER_MAX_CONNECTIONS) "
    "or refused (past the bound with every connection serving a request).",
    ["reason"],
)


def status_class(status: int | None) -> str:
    return "none" if status is None else f"{status // 100}xx"


@functools.cache
def attempt_counter(outcome: str, status: int | None) -> Any:
    """The labelled child, looked up once per (outcome, status) instead of per attempt."""
    return ATTEMPTS.labels(outcome, status_class(status))


@functools.cache
def attempt_duration(outcome: str) -> Any:
    return ATTEMPT_DURATION.labels(outcome)


# The outcomes of an attempt, and the status classes each can come with.
OUTCOME_STATUS_CLASSES = {
    "success": ("2xx",),
    "http_error": ("1xx", "3xx", "4xx", "5xx"),
    "timeout": ("none",),
    "connection_error": ("none",),
    "blocked": ("none",),
}
HELD_REASONS = tuple(str(reason) for reason in HeldReason)  # domain/enums.py


def _declare_label_values() -> None:
    """Create the known label values at import, so every series exists from the first scrape
    (an `increase()` over a series that appears at 1 would miss the first event)."""
    for outcome, classes in OUTCOME_STATUS_CLASSES.items():
        for status in classes:
            ATTEMPTS.labels(outcome, status)
    for reason in HELD_REASONS:
        QUEUE_HELD.labels(reason)
    for reason in ("exhausted", "gone", "disabled", "expunged"):
        GIVEN_UP.labels(reason)
    for reason in ("failing", "gone"):
        WEBHOOKS_DISABLED.labels(reason)
    for outcome in ("success", "http_error", "timeout", "connection_error", "blocked"):
        ATTEMPT_DURATION.labels(outcome)
    for reason in ("requests", "pool", "timeout"):
        API_OVERLOADED.labels(reason)
    for reason in ("head_timeout", "body_timeout", "evicted", "refused"):
        API_CONNECTIONS_CLOSED.labels(reason)


_declare_label_values()


def declare_published(types_by_source: dict[str, Any]) -> None:
    """Declare `dispatcher_events_published_total` for each source and the event types it
    publishes (given by the caller: the catalog lives in the domain)."""
    for source, types in types_by_source.items():
        for event_type in types:
            EVENTS_PUBLISHED.labels(source, event_type)


def observe_many(histogram: Any, values: list[float]) -> None:
    """Observe many values at once: one increment per bucket touched and one for the sum,
    instead of two locked increments per value."""
    if not values:
        return
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None:  # another client version
        for value in values:
            histogram.observe(value)
        return
    counts = collections.Counter(bisect.bisect_left(bounds, value) for value in values)
    for index, n in counts.items():
        buckets[index].inc(n)
    total.inc(sum(values))


# The `webhook` label of the attempts of webhooks beyond DISPATCHER_METRICS_PER_WEBHOOK_LIMIT.
OTHER_WEBHOOKS = "_other"


class WebhookSeries:
    """Which webhooks have a `dispatcher_webhook_delivery_attempts_total` series of their
    own: the first `limit` to be attempted (DISPATCHER_METRICS_PER_WEBHOOK_LIMIT); the
    attempts of any other are counted under `webhook="_other"`, so a scrape stays bounded
    however many webhooks there are. `forget` drops the series of webhooks deleted since
    (the monitor asks the database which), freeing their places."""

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self._ids: set[str] = set()

    def inc(self, webhook_id: str, outcome: str, n: int) -> None:
        if webhook_id not in self._ids:
            if len(self._ids) >= self.limit:
                webhook_id = OTHER_WEBHOOKS
            else:
                self._ids.add(webhook_id)
        WEBHOOK_ATTEMPTS.labels(webhook_id, outcome).inc(n)

    def ids(self) -> list[str]:
        return sorted(self._ids)

    def forget(self, webhook_ids: list[str]) -> None:
        for webhook_id in webhook_ids:
            if webhook_id not in self._ids:
                continue
            self._ids.discard(webhook_id)
            for outcome in OUTCOME_STATUS_CLASSES:
                with contextlib.suppress(KeyError):  # never counted with that outcome
                    WEBHOOK_ATTEMPTS.remove(webhook_id, outcome)


WEBHOOK_SERIES = WebhookSeries()


class AttemptTally:
    """Per-attempt facts gathered in memory and written to the metrics once per batch.

    Under load a histogram observation per attempt (two locked increments each, three
    histograms) cost about 7% of the engine's CPU; batching keeps every series exact.
    """

    def __init__(self, per_webhook: bool) -> None:
        self.per_webhook = per_webhook
        self._attempts: collections.Counter[tuple[str, int | None]] = collections.Counter()
        self._durations: dict[str, list[float]] = collections.defaultdict(list)
        self._lags: list[float] = []
        self._end_to_end: list[float] = []
        self._webhooks: collections.Counter[tuple[str, str]] = collections.Counter()

    def add(
        self,
        outcome: str,
        status: int | None,
        seconds: float,
        lag: float,
        end_to_end: float | None,
        webhook_id: str,
    ) -> None:
        self._attempts[(outcome, status)] += 1
        self._durations[outcome].append(seconds)
        self._lags.append(lag)
        if end_to_end is not None:
            self._end_to_end.append(end_to_end)
        if self.per_webhook:
            self._webhooks[(webhook_id, outcome)] += 1

    def flush(self) -> None:
        attempts, self._attempts = self._attempts, collections.Counter()
        durations, self._durations = self._durations, collections.defaultdict(list)
        lags, self._lags = self._lags, []
        end_to_end, self._end_to_end = self._end_to_end, []
        webhooks, self._webhooks = self._webhooks, collections.Counter()
        for (outcome, status), n in attempts.items():
            attempt_counter(outcome, status).inc(n)
        for outcome, values in durations.items():
            observe_many(attempt_duration(outcome), values)
        observe_many(LAG, lags)
        observe_many(END_TO_END, end_to_end)
        for (webhook_id, outcome), n in webhooks.items():
            WEBHOOK_SERIES.inc(webhook_id, outcome, n)


# Flow control (docs/delivery.md, "Flow control")
EFFECTIVE_RATE = Gauge(
    "dispatcher_endpoint_effective_rate",
    "Requests per second an endpoint gets while the receiver's 429 answers have its rate "
    "adapted (AIMD below its rateLimit, or below its throughput when it has none); the series "
    "exists only while the rate is adapted (capped at DISPATCHER_METRICS_PER_WEBHOOK_LIMIT "
    "webhooks).",
    ["webhook"],
)


class EffectiveRates:
    """The `dispatcher_endpoint_effective_rate` series: one per endpoint whose rate is adapted
    now, removed once it has recovered. The recorder sets what its batches change; the
    monitor replaces the whole set with the database's (what every engine adapted)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def set(self, webhook_id: str, rate: float | None) -> None:
        if rate is None:
            if webhook_id in self._ids:
                self._ids.discard(webhook_id)
                with contextlib.suppress(KeyError):
                    EFFECTIVE_RATE.remove(webhook_id)
            return
        if webhook_id in self._ids or len(self._ids) < WEBHOOK_SERIES.limit:
            self._ids.add(webhook_id)
            EFFECTIVE_RATE.labels(webhook_id).set(rate)

    def replace(self, rates: dict[str, float]) -> None:
        for webhook_id in sorted(self._ids - rates.keys()):
            self.set(webhook_id, None)
        for webhook_id, rate in rates.items():
            self.set(webhook_id, rate)


EFFECTIVE_RATES = EffectiveRates()
