"""13. Hot spots: work concentrated on few endpoints, as production meets it (#22).

Three comparisons, each drain on a database created for it (no ANALYZE), one worker with the
product's defaults (`maxConcurrency` 10 per endpoint), against the shared fast sink (which
answers in well under a millisecond):

- **one webhook**: 5,000 deliveries to ONE webhook (the most common set-up: one platform
  endpoint). The engine, not the receiver, must not be the bound: target ≥ 5,000/s.
- **deep backlog on a few**: 200,000 deliveries over 20 webhooks (10,000 each) ÷ the same
  200,000 over 100 webhooks (2,000 each): catch-up after a receiver's outage. Target ≥ 0.8.
- **depth**: 200,000 deliveries over 100 webhooks ÷ 20,000 over the same 100: a deep queue
  must not slow the drain. Target ≥ 0.8.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Run
from benchmarks.scenarios.drain import dispatcher_drain

NAME = "hotspots"
TITLE = "13. Hot spots (one webhook, a deep backlog on a few, depth)"
TARGET_TEXT = "one webhook >= 5,000/s; 20 webhooks >= 0.8 x 100 webhooks; 200k >= 0.8 x 20k"
ONE_WEBHOOK_TARGET = 5_000.0
SHARE_TARGET = 0.8


def _brief(result: dict[str, Any]) -> dict[str, Any]:
    keys = ("deliveries", "subscriptions", "seconds", "rate", "duplicates", "cpu_us_per_delivery")
    return {k: result[k] for k in keys if k in result}


async def run(r: Run) -> dict[str, Any]:
    sink = await r.shared_sink()
    one_n = r.size(5_000, 2_000)
    deep_n = r.size(200_000, 20_000)
    shallow_n = r.size(20_000, 4_000)
    one = await dispatcher_drain(r, sink, one_n, scenario="hotspots_one", subscriptions=1)
    r.log(f"hotspots: one webhook {one['rate']:,.0f} deliveries/s")
    few = await dispatcher_drain(r, sink, deep_n, scenario="hotspots_few", subscriptions=20)
    r.log(f"hotspots: {deep_n:,} over 20 webhooks {few['rate']:,.0f} deliveries/s")
    wide = await dispatcher_drain(r, sink, deep_n, scenario="hotspots_wide", subscriptions=100)
    r.log(f"hotspots: {deep_n:,} over 100 webhooks {wide['rate']:,.0f} deliveries/s")
    shallow = await dispatcher_drain(
        r, sink, shallow_n, scenario="hotspots_shallow", subscriptions=100
    )
    r.log(f"hotspots: {shallow_n:,} over 100 webhooks {shallow['rate']:,.0f} deliveries/s")
    few_share = few["rate"] / wide["rate"]
    depth_share = wide["rate"] / shallow["rate"]
    met = (
        one["rate"] >= ONE_WEBHOOK_TARGET
        and few_share >= SHARE_TARGET
        and depth_share >= SHARE_TARGET
    )
    return {
        "title": TITLE,
        "parameters": {
            "one_webhook": one_n,
            "deep": deep_n,
            "shallow": shallow_n,
            "engine_settings": one["engine_settings"],
            "database": "created for each drain; no ANALYZE/VACUUM by the harness",
        },
        "measured": {
            "value": one["rate"],
            "unit": "deliveries/s to one webhook",
            "one_webhook": _brief(one),
            "few_webhooks": _brief(few),
            "wide": _brief(wide),
            "shallow": _brief(shallow),
        },
        "baseline": {"name": "same work over 100 webhooks", "value": wide["rate"]},
        "ratio": few_share,
        "depth_ratio": depth_share,
        "target": {"text": TARGET_TEXT},
        "met": met,
        "summary": {
            "measured": f"one webhook {one['rate']:,.0f}/s; {deep_n:,} over 20 webhooks "
            f"{few['rate']:,.0f}/s; over 100 {wide['rate']:,.0f}/s; {shallow_n:,} over 100 "
            f"{shallow['rate']:,.0f}/s",
            "baseline": f"{deep_n:,} over 100 webhooks {wide['rate']:,.0f}/s",
            "ratio": f"few ÷ wide {few_share:.2f}; deep ÷ shallow {depth_share:.2f}",
        },
    }
