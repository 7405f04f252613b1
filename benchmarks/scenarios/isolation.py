"""7. Isolation: 10% of subscriptions hang until the timeout; throughput to the healthy 90%.
And one subscription limited to 10 requests/s: throughput to the other 99.

Three drains of the same N over 100 subscriptions, back to back, with
`DISPATCHER_REQUEST_TIMEOUT=2` (so that a hung attempt ends within the run; the default is
15 s): first all healthy (the baseline), then with 10 of the subscriptions pointing at a second
sink process that never answers (it drops the connection after 60 s), then with one
subscription (all healthy) given `rateLimit` 10: its backlog (1% of N) waits for the limit
while the others drain. The figures are the healthy 90%'s (then the unlimited 99%'s)
deliveries/s, from the first request to the moment all of them are recorded, ÷ the
all-healthy run's deliveries/s; the target holds for both.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Run, start_sink, stop_process
from benchmarks.scenarios.drain import dispatcher_drain

NAME = "isolation"
TITLE = "7. Isolation (10% hang)"
TARGET = 0.90
TIMEOUT_S = 2.0
RATE_LIMIT = 10  # requests per second, for the one limited endpoint


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
    limited = await dispatcher_drain(
        r, sink, n, scenario="isolation_limited", limited=1, rate_limit=RATE_LIMIT,
        settings=settings,
    )  # fmt: skip
    limited_share = limited["rate"] / baseline
    r.log(
        f"isolation: with one endpoint limited to {RATE_LIMIT}/s, the other 99% at "
        f"{limited['rate']:,.0f} deliveries/s = {limited_share:.0%} of all-healthy (the limited "
        f"one at {limited['limited_rate']:.1f}/s)"
    )
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
        "limited": {
            "value": limited["rate"],
            "unit": f"deliveries/s to the 99% not limited (one at {RATE_LIMIT}/s)",
            "ratio": limited_share,
            **limited,
        },
        "target": {"text": "≥ 90% of all-healthy", "op": ">=", "value": TARGET},
        "met": share >= TARGET and limited_share >= TARGET,
        "notes": [
            f"request timeout {TIMEOUT_S:g} s (default 15 s) to keep the run short",
            f"one endpoint limited to {RATE_LIMIT}/s: the other 99% at "
            f"{limited['rate']:,.0f} deliveries/s = {limited_share:.2f} of all-healthy; the "
            f"limited one at {limited['limited_rate']:.1f}/s meanwhile",
        ],
        "summary": {
            "measured": f"{value:,.0f} deliveries/s to healthy 90% "
            f"({hung['hang_sink']['count']:,} attempts hung); one endpoint at "
            f"{RATE_LIMIT}/s: {limited['rate']:,.0f} deliveries/s to the other 99%",
            "baseline": f"all healthy {baseline:,.0f} deliveries/s",
            "ratio": f"{share:.2f} (hanging), {limited_share:.2f} (limited)",
        },
    }
