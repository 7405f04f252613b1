"""7. Isolation: 10% of subscriptions hang until the timeout; throughput to the healthy 90%.

Two drains of the same N over 100 subscriptions, back to back, with
`DISPATCHER_REQUEST_TIMEOUT=2` (so that a hung attempt ends within the run; the default is
15 s): first all healthy (the baseline), then with 10 of the subscriptions pointing at a second
sink process that never answers (it drops the connection after 60 s). The figure is the
healthy 90%'s deliveries/s, from the first request to the moment all of them are recorded,
÷ the all-healthy run's deliveries/s.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Run, start_sink, stop_process
from benchmarks.scenarios.drain import dispatcher_drain

NAME = "isolation"
TITLE = "7. Isolation (10% hang)"
TARGET = 0.90
TIMEOUT_S = 2.0


async def run(r: Run) -> dict[str, Any]:
    sink = await r.shared_sink()
    n = r.size(50_000, 5_000)
    settings = {"request_timeout": TIMEOUT_S}
    healthy = await dispatcher_drain(r, sink, n, scenario="isolation_base", settings=settings)
    r.log(f"isolation: all healthy {healthy['rate']:,.0f} deliveries/s")
    hang = await start_sink(r, "hang", hang_max=60.0, name="sink-hang")
    try:
        hung = await dispatcher_drain(
            r, sink, n, scenario=NAME, hang_sink=hang, hanging=10, settings=settings
        )
    finally:
        await stop_process(r, hang.proc)
    value, baseline = hung["rate"], healthy["rate"]
    share = value / baseline
    r.log(f"isolation: healthy 90% at {value:,.0f} deliveries/s = {share:.0%} of all-healthy")
    return {
        "title": TITLE,
        "parameters": {
            "deliveries": hung["deliveries_total"],
            "subscriptions": 100,
            "hanging_subscriptions": 10,
            "request_timeout_s": TIMEOUT_S,
            "engine_settings": hung["engine_settings"],
            "database": "created for each drain; no ANALYZE/VACUUM by the harness",
        },
        "measured": {"value": value, "unit": "deliveries/s to the healthy 90%", **hung},
        "baseline": {"name": "all-healthy run", "value": baseline, **healthy},
        "ratio": share,
        "target": {"text": "≥ 90% of all-healthy", "op": ">=", "value": TARGET},
        "met": share >= TARGET,
        "notes": [f"request timeout {TIMEOUT_S:g} s (default 15 s) to keep the run short"],
        "summary": {
            "measured": f"{value:,.0f} deliveries/s to healthy 90% "
            f"({hung['hang_sink']['count']:,} attempts hung)",
            "baseline": f"all healthy {baseline:,.0f} deliveries/s",
            "ratio": f"{share:.2f}",
        },
    }
