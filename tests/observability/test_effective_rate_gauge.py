"""`dispatcher_endpoint_effective_rate` in a real scrape: a series per endpoint whose rate the
receiver's 429s adapted (flow control, docs/delivery.md), as the database has it whichever
engine adapted it (the monitor's refresh), gone once the rate has recovered."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from dispatcher import monitor
from dispatcher.domain.clock import SystemClock
from dispatcher.store.database import Database
from tests.conftest import Workspace
from tests.engine.helpers import subscribe
from tests.observability.prometheus import scrape

GAUGE = "dispatcher_endpoint_effective_rate"


def rates(text: str) -> dict[str, float]:
    return {
        s.labels["webhook"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == GAUGE
    }


async def set_adapted(db: Database, hook_id: str, rate: float | None) -> None:
    """What an engine's record writes (store/flow_control.py), as another engine would."""
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE webhooks SET adapted_rate = $2, adapted_ceiling = CASE WHEN $2::float8 IS "
            "NULL THEN NULL ELSE 10 END WHERE id = $1",
            hook_id,
            rate,
        )


async def test_the_gauge_follows_the_adapted_rates(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    slowed = await subscribe(client, ws, "https://hooks.example.com/a", rateLimit=10)
    plain = await subscribe(client, ws, "https://hooks.example.com/b")
    await monitor.refresh_once(db, SystemClock(), lambda: True)
    found = rates(await scrape(client))
    assert slowed["id"] not in found and plain["id"] not in found  # not adapted: no series

    await set_adapted(db, slowed["id"], 2.5)
    await monitor.refresh_once(db, SystemClock(), lambda: True)
    assert rates(await scrape(client))[slowed["id"]] == 2.5

    await set_adapted(db, slowed["id"], None)  # recovered
    await monitor.refresh_once(db, SystemClock(), lambda: True)
    assert slowed["id"] not in rates(await scrape(client))
