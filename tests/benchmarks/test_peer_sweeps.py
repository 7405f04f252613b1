"""The peer scenario's sweep rules: every point reported, failures kept, the fastest measured
point is the baseline (benchmarks/sweeps.py; no npm, no database needed)."""

from __future__ import annotations

from typing import Any

from benchmarks import sweeps


def test_the_graphile_grid_covers_every_combination_of_its_knobs() -> None:
    grid = sweeps.graphile_grid()
    assert len(grid) == 4 * 3 * 2
    assert {p["concurrency"] for p in grid} == {10, 50, 100, 200}
    assert {p["local_queue"] for p in grid} == {-1, 50, 500}
    assert {p["batch_delay_ms"] for p in grid} == {-1, 10}
    assert len({tuple(p.values()) for p in grid}) == len(grid)
    # The pool follows the concurrency (Graphile's advice) but stays under max_connections.
    assert {p["concurrency"]: p["max_pool_size"] for p in grid} == {
        10: 10,
        50: 50,
        100: 50,
        200: 50,
    }


def test_the_best_point_is_the_fastest_measured_one_and_failures_do_not_count() -> None:
    points: list[dict[str, Any]] = [
        {"concurrency": 10, "local_queue": -1, "batch_delay_ms": -1, "rate": 900.0},
        {"concurrency": 50, "local_queue": 500, "batch_delay_ms": 10, "error": "TimeoutError"},
        {"concurrency": 100, "local_queue": 50, "batch_delay_ms": -1, "rate": 2400.5},
    ]
    best = sweeps.best_point(points)
    assert best is points[2]
    assert sweeps.best_point([points[1]]) is None


def test_every_point_is_in_the_summary_line_errors_included() -> None:
    points: list[dict[str, Any]] = [
        {"concurrency": 10, "local_queue": -1, "batch_delay_ms": -1, "rate": 1234.4},
        {"concurrency": 10, "local_queue": 500, "batch_delay_ms": 10, "rate": 2000.0},
        {"concurrency": 200, "local_queue": 50, "batch_delay_ms": -1, "error": "RuntimeError"},
    ]
    assert sweeps.graphile_sweep_text(points) == (
        "c 10: off/off 1,234, 500/10 2,000; c 200: 50/off error"
    )
    assert sweeps.graphile_label(points[1]) == "concurrency 10, localQueue 500, batch delay 10 ms"
    assert sweeps.graphile_label(points[0]) == "concurrency 10, localQueue off, batch delay off"
