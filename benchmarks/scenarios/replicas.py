"""11. Replicas: 1, 2 and 3 engine processes on one database.

The same drain as scenario 2 (N deliveries over 100 subscriptions, same sink), run three
times with 1, 2 and 3 `dispatcher worker` processes sharing the database. Reported:
deliveries/s for each (ratio to 1 process) and the deliveries the sink received more than once
(same `webhook-id`), which must be 0 without faults. On a 2-core machine that also runs the
sink and Postgres, more processes cannot add CPU: this shows that replicas are safe and what
they cost, not how they scale on a bigger machine.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Run
from benchmarks.scenarios.drain import dispatcher_drain

NAME = "replicas"
TITLE = "11. Replicas (1, 2, 3 engines)"


async def run(r: Run) -> dict[str, Any]:
    sink = await r.shared_sink()
    n = r.size(50_000, 5_000)
    runs = []
    for workers in (1, 2, 3):
        result = await dispatcher_drain(r, sink, n, scenario=f"replicas{workers}", workers=workers)
        runs.append(result)
        r.log(
            f"replicas: x{workers}: {result['rate']:,.0f} deliveries/s, "
            f"{result['duplicates']} duplicates"
        )
    base = runs[0]["rate"]
    duplicates = sum(x["duplicates"] for x in runs)
    ratios = [x["rate"] / base for x in runs]
    return {
        "title": TITLE,
        "parameters": {
            "deliveries": runs[0]["deliveries"],
            "subscriptions": 100,
            "database": "created for each drain; no ANALYZE/VACUUM by the harness",
        },
        "measured": {
            "value": runs[-1]["rate"],
            "unit": "deliveries/s with 3 processes",
            "runs": runs,
            "duplicates": duplicates,
            "ratios": ratios,
        },
        "baseline": {"name": "1 process", "value": base},
        "ratio": ratios[-1],
        "target": {"text": "0 duplicates (throughput reported)", "op": "==", "value": 0},
        "met": duplicates == 0,
        "summary": {
            "measured": " / ".join(f"x{x['workers']}: {x['rate']:,.0f}" for x in runs)
            + f" deliveries/s; {duplicates} duplicates",
            "baseline": f"1 process {base:,.0f} deliveries/s",
            "ratio": " / ".join(f"{x:.2f}" for x in ratios),
        },
    }
