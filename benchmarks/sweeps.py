"""The peers' sweeps: their points, labels, best point and one-line summaries (pure code).

Scenario 3 measures each peer at its best: every point of its sweep runs in the same run, a
point that fails is reported with its error and does not hide the others, and the fastest
measured point is the baseline dispatcher is divided by. Kept apart from the scenario (which
needs the `bench` extra and a database) so that the rules are unit-tested in `make test`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

# Graphile Worker's knobs (0.17: `concurrentJobs`, `localQueue.size`, and
# `completeJobBatchDelay` = `failJobBatchDelay`); -1 is Graphile's own "off" for both batches.
GRAPHILE_CONCURRENCY = (10, 50, 100, 200)
GRAPHILE_LOCAL_QUEUE = (-1, 50, 500)
GRAPHILE_BATCH_DELAY_MS = (-1, 10)
# Graphile warns when its pool (`maxPoolSize`, default 10) is smaller than the concurrency:
# without a local queue every running job fetches and completes on a connection of its own.
# The pool follows the concurrency up to 50, half of Postgres' default max_connections (100),
# which the harness and the server's other databases share.
GRAPHILE_MAX_POOL_SIZE = 50


def graphile_grid(
    concurrency: Sequence[int] = GRAPHILE_CONCURRENCY,
    local_queue: Sequence[int] = GRAPHILE_LOCAL_QUEUE,
    batch_delay_ms: Sequence[int] = GRAPHILE_BATCH_DELAY_MS,
) -> list[dict[str, int]]:
    """Every combination of the knobs, in the order they run (concurrency outermost), each
    with the pool size that goes with its concurrency."""
    return [
        {
            "concurrency": c,
            "local_queue": q,
            "batch_delay_ms": d,
            "max_pool_size": min(c, GRAPHILE_MAX_POOL_SIZE),
        }
        for c, q, d in itertools.product(concurrency, local_queue, batch_delay_ms)
    ]


def off(value: int) -> str:
    return "off" if value < 0 else str(value)


def graphile_label(point: dict[str, Any]) -> str:
    return (
        f"concurrency {point['concurrency']}, localQueue {off(point['local_queue'])}, "
        f"batch delay {off(point['batch_delay_ms'])}"
        + (" ms" if point["batch_delay_ms"] >= 0 else "")
    )


def best_point(points: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest measured point (one with a `rate`); None when none was measured."""
    measured = [p for p in points if isinstance(p.get("rate"), int | float)]
    return max(measured, key=lambda p: p["rate"]) if measured else None


def rate_text(point: dict[str, Any]) -> str:
    return f"{point['rate']:,.0f}" if "rate" in point else "error"


def graphile_sweep_text(points: Sequence[dict[str, Any]]) -> str:
    """Every point in one line, grouped by concurrency: `c 10: off/off 1,234, ...; c 50: ...`,
    each point as localQueue/batch delay then jobs/s."""
    groups: dict[int, list[str]] = {}
    for p in points:
        knobs = f"{off(p['local_queue'])}/{off(p['batch_delay_ms'])}"
        groups.setdefault(p["concurrency"], []).append(f"{knobs} {rate_text(p)}")
    return "; ".join(f"c {c}: " + ", ".join(items) for c, items in groups.items())
