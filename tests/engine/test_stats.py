"""Endpoint health: `GET /v1/webhooks/{id}/stats` over a window, from what the real engine sent
to a real receiver, and from the rollups the recorder keeps (real Postgres)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.domain import health
from dispatcher.domain.clock import isoformat
from dispatcher.domain.health import StatsWindow
from dispatcher.domain.outcomes import AttemptOutcome, AttemptResult, Delivered
from dispatcher.store import maintenance, queue, stats
from dispatcher.store.database import Database
from tests.clock import FakeClock
from tests.conftest import MakeWorkspace, Workspace, wait_for
from tests.engine.helpers import attempted, deliveries, get_json, publish, subscribe
from tests.receiver import EngineFactory, Receiver, answer, sequence
from tests.records import attempt_result

NO_ATTEMPTS = {o.value: 0 for o in AttemptOutcome}
NO_TIMES = {"p50": None, "p95": None, "p99": None}


async def stats_of(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, window: str | None = None
) -> Any:
    query = "" if window is None else f"?window={window}"
    return await get_json(client, ws, f"/v1/webhooks/{hook_id}/stats{query}")


async def attempt_log(client: TestClient[Any, Any], ws: Workspace, hook_id: str) -> list[Any]:
    """Every attempt to the endpoint, newest first."""
    page = await get_json(client, ws, f"/v1/webhooks/{hook_id}/attempts?limit=100")
    data: list[Any] = page["data"]
    return data


async def test_the_figures_follow_the_attempts(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = sequence(answer(500), answer(503), answer(200))
    hook = await subscribe(client, ws, receiver.url("/hook"))
    empty = await stats_of(client, ws, hook["id"])
    assert empty == {
        "window": "24h",
        "deliveries": {"pending": 0, "delivered": 0, "failed": 0},
        "attempts": NO_ATTEMPTS,
        "successRate": None,
        "responseMs": NO_TIMES,
        "lastSuccessAt": None,
        "lastFailureAt": None,
        "failingSince": None,
        "effectiveRateLimit": None,  # unrestricted (tests/engine/test_flow_control.py)
    }

    await publish(client, ws)
    engine = await make_engine(retry_schedule=(1.0, 1.0), disable_after=10**8)
    await attempted(client, ws, hook["id"], 1, engine)
    first = await stats_of(client, ws, hook["id"])
    (failure,) = await attempt_log(client, ws, hook["id"])
    assert first["deliveries"] == {"pending": 1, "delivered": 0, "failed": 0}
    assert first["attempts"] == {**NO_ATTEMPTS, "http_error": 1}
    assert first["successRate"] == 0.0
    # Failing since the start of its first failed attempt, which is also its latest one.
    assert first["lastFailureAt"] == first["failingSince"] == failure["createdAt"]
    assert first["lastSuccessAt"] is None

    clock.advance(2)
    await attempted(client, ws, hook["id"], 2, engine)
    clock.advance(2)
    await attempted(client, ws, hook["id"], 3, engine)
    figures = await stats_of(client, ws, hook["id"])
    success, second, first_failure = await attempt_log(client, ws, hook["id"])
    assert figures["window"] == "24h"
    assert figures["deliveries"] == {"pending": 0, "delivered": 1, "failed": 0}
    assert figures["attempts"] == {**NO_ATTEMPTS, "success": 1, "http_error": 2}
    assert figures["successRate"] == 1 / 3
    assert figures["lastSuccessAt"] == success["createdAt"]
    assert figures["lastFailureAt"] == second["createdAt"]
    assert figures["failingSince"] is None  # after any success
    # Every attempt got an answer: each percentile is one of their response times (they are
    # under 10 ms on loopback, where the histogram is exact) or within 10% of one.
    times = [a["responseMs"] for a in (success, second, first_failure)]
    for name in ("p50", "p95", "p99"):
        value = figures["responseMs"][name]
        assert isinstance(value, int)
        assert any(abs(value - t) <= max(t // 10, 0) for t in times), (value, times)
    assert figures["responseMs"]["p99"] == max(
        health.bucket_value(health.bucket_of(t)) for t in times
    )


async def test_failing_since_is_the_start_of_the_current_run_of_failures(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    receiver.behaviours["/hook"] = sequence(answer(200), answer(500), answer(502), answer(200))
    hook = await subscribe(client, ws, receiver.url("/hook"))
    engine = await make_engine(retry_schedule=(60.0, 60.0), disable_after=10**8)
    await publish(client, ws, "CT1")
    await attempted(client, ws, hook["id"], 1, engine)
    await publish(client, ws, "CT2")

    async def attempts_made(n: int) -> None:
        async def made() -> bool:
            engine.poke()
            return len(await attempt_log(client, ws, hook["id"])) >= n

        await wait_for(made, message=f"{n} attempts")

    await attempts_made(2)
    newest, oldest = await attempt_log(client, ws, hook["id"])
    assert (newest["outcome"], oldest["outcome"]) == ("http_error", "success")
    figures = await stats_of(client, ws, hook["id"])
    assert figures["lastSuccessAt"] == oldest["createdAt"]
    assert figures["failingSince"] == figures["lastFailureAt"] == newest["createdAt"]

    clock.advance(61)
    await attempts_made(3)
    again = (await attempt_log(client, ws, hook["id"]))[0]
    figures = await stats_of(client, ws, hook["id"])
    assert figures["lastFailureAt"] == again["createdAt"]
    assert figures["failingSince"] == newest["createdAt"]  # still the run's first failure
    assert figures["deliveries"] == {"pending": 1, "delivered": 1, "failed": 0}

    clock.advance(61)
    await attempts_made(4)
    figures = await stats_of(client, ws, hook["id"])
    assert figures["failingSince"] is None
    assert figures["lastSuccessAt"] == (await attempt_log(client, ws, hook["id"]))[0]["createdAt"]
    assert figures["deliveries"] == {"pending": 0, "delivered": 2, "failed": 0}
    assert figures["attempts"] == {**NO_ATTEMPTS, "success": 2, "http_error": 2}


async def test_deliveries_are_counted_by_their_status_now(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
) -> None:
    receiver.behaviours["/hook"] = answer(500)
    hook = await subscribe(client, ws, receiver.url("/hook"))
    base = f"/v1/webhooks/{hook['id']}"
    await publish(client, ws, "CT1")
    await publish(client, ws, "CT2")
    engine = await make_engine(retry_schedule=(), disable_after=10**8)

    async def settled(counts: dict[str, int]) -> None:
        async def reached() -> bool:
            engine.poke()
            return bool((await stats_of(client, ws, hook["id"]))["deliveries"] == counts)

        await wait_for(reached, message=f"deliveries {counts}")

    # Given up after their only attempt.
    await settled({"pending": 0, "delivered": 0, "failed": 2})
    # A manual retry makes one pending again, then delivered.
    receiver.behaviours["/hook"] = answer(204)
    one = (await deliveries(client, ws, hook["id"]))[0]
    resp = await client.post(f"{base}/deliveries/{one['id']}/retry", headers=ws.headers)
    assert resp.status == 202, await resp.text()
    await settled({"pending": 0, "delivered": 1, "failed": 1})
    # A delivery waiting while no engine runs is pending; disabling its endpoint gives it up.
    await engine.stop()
    await publish(client, ws, "CT3")
    assert (await stats_of(client, ws, hook["id"]))["deliveries"] == {
        "pending": 1,
        "delivered": 1,
        "failed": 1,
    }
    resp = await client.patch(base, json={"enabled": False}, headers=ws.headers)
    assert resp.status == 200, await resp.text()
    figures = await stats_of(client, ws, hook["id"])
    assert figures["deliveries"] == {"pending": 0, "delivered": 1, "failed": 2}
    # Only attempts are attempts: the give-up made none.
    assert figures["attempts"] == {**NO_ATTEMPTS, "success": 1, "http_error": 2}
    # Recover makes the failed ones pending again.
    assert (await client.patch(base, json={"enabled": True}, headers=ws.headers)).status == 200
    since = isoformat(datetime.now(UTC) - timedelta(hours=1))
    resp = await client.post(f"{base}/recover", json={"since": since}, headers=ws.headers)
    assert resp.status == 202, await resp.text()
    assert (await stats_of(client, ws, hook["id"]))["deliveries"] == {
        "pending": 2,
        "delivered": 1,
        "failed": 0,
    }


async def test_attempts_without_an_answer_have_no_response_time(
    client: TestClient[Any, Any], ws: Workspace, make_engine: EngineFactory
) -> None:
    # Port 9 on loopback: nothing listens, connecting is refused.
    hook = await subscribe(client, ws, "http://127.0.0.1:9/nothing")
    await publish(client, ws)
    engine = await make_engine(retry_schedule=(), disable_after=10**8)
    await attempted(client, ws, hook["id"], 1, engine)
    (only,) = await attempt_log(client, ws, hook["id"])
    figures = await stats_of(client, ws, hook["id"], "1h")
    assert figures["window"] == "1h"
    assert figures["attempts"] == {**NO_ATTEMPTS, "connection_error": 1}
    assert figures["successRate"] == 0.0
    assert figures["responseMs"] == NO_TIMES
    assert figures["deliveries"] == {"pending": 0, "delivered": 0, "failed": 1}
    assert figures["failingSince"] == figures["lastFailureAt"] == only["createdAt"]


async def test_windows_count_back_from_now(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    clock: FakeClock,
) -> None:
    hook = await subscribe(client, ws, receiver.url("/hook"))
    await publish(client, ws)
    engine = await make_engine()
    await attempted(client, ws, hook["id"], 1, engine)
    everything = await stats_of(client, ws, hook["id"], "1h")
    assert everything["attempts"] == {**NO_ATTEMPTS, "success": 1}

    clock.advance(2 * 3600)
    hour = await stats_of(client, ws, hook["id"], "1h")
    assert hour["attempts"] == NO_ATTEMPTS
    assert hour["deliveries"] == {"pending": 0, "delivered": 0, "failed": 0}
    assert (hour["successRate"], hour["responseMs"]) == (None, NO_TIMES)
    # The latest success is of any time.
    assert hour["lastSuccessAt"] == everything["lastSuccessAt"] is not None
    for window in (None, "24h", "7d"):
        assert (await stats_of(client, ws, hook["id"], window))["attempts"] == everything[
            "attempts"
        ]

    clock.advance(2 * 86400)
    assert (await stats_of(client, ws, hook["id"]))["attempts"] == NO_ATTEMPTS
    week = await stats_of(client, ws, hook["id"], "7d")
    assert week["window"] == "7d"
    assert week["attempts"] == everything["attempts"]
    assert week["deliveries"] == {"pending": 0, "delivered": 1, "failed": 0}


async def test_bad_input_and_who_may_read(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    make_workspace: MakeWorkspace,
) -> None:
    hook = await subscribe(client, ws, receiver.url("/hook"))
    await publish(client, ws)
    await attempted(client, ws, hook["id"], 1, await make_engine())
    path = f"/v1/webhooks/{hook['id']}/stats"
    for query in ("window=2h", "window=", "window=1H", "window=24h&window=1h", "since=1h"):
        resp = await client.get(f"{path}?{query}", headers=ws.headers)
        assert resp.status == 400, query
        body = await resp.json()
        assert body["code"] == "validation_error"
        assert body["errors"][0]["path"] == f"query.{query.split('=')[0]}"
    other = await make_workspace()
    reader = await make_workspace(scopes=["webhooks:read"])
    writer = await make_workspace(scopes=["webhooks:write"])
    assert (await client.get(path, headers=other.headers)).status == 404
    assert (await client.get(path, headers=reader.headers)).status == 404
    assert (await client.get(path, headers=writer.headers)).status == 403
    assert (await client.get(path)).status == 401
    missing = f"/v1/webhooks/WH{'0' * 32}/stats"
    assert (await client.get(missing, headers=ws.headers)).status == 404
    # A deleted webhook's stats stay readable, like its deliveries.
    before = await stats_of(client, ws, hook["id"])
    assert (await client.delete(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).status == 204
    assert await stats_of(client, ws, hook["id"]) == before
    assert before["attempts"]["success"] == 1


# -- the rollups, through the store ---------------------------------------------------------


def answered(webhook_id: str, started_at: datetime, ms: int, ok: bool = True) -> AttemptResult:
    outcome = AttemptOutcome.SUCCESS if ok else AttemptOutcome.HTTP_ERROR
    return attempt_result(webhook_id, started_at, outcome, 200 if ok else 500, ms)


async def roll_up(db: Database, attempts: list[AttemptResult]) -> None:
    async with db.transaction() as conn:
        await stats.record_batch(conn, attempts, [], "engine-a")


async def test_every_window_counts_whole_minutes_over_minute_and_hour_rows(db: Database) -> None:
    now = datetime(2026, 3, 10, 14, 37, 21, tzinfo=UTC)
    rand = random.Random(7)
    spread = [now - timedelta(seconds=rand.uniform(0, 8 * 86400)) for _ in range(3000)]
    attempts = [
        attempt_result("WH1", at, rand.choice(list(AttemptOutcome)), None, 0) for at in spread
    ]
    attempts.append(attempt_result("WH2", now, AttemptOutcome.SUCCESS, 200, 5))  # another endpoint
    for start in range(0, len(attempts), 500):
        await roll_up(db, attempts[start : start + 500])
    for window in StatsWindow:
        since = health.window_rows(now, window).since
        inside = [a for a in attempts if a.webhook_id == "WH1" and a.started_at >= since]
        assert since <= now - window.duration < since + timedelta(minutes=1)
        figures = await stats.read(db, "WH1", now, window)
        expected = {o: sum(1 for a in inside if a.outcome == o) for o in AttemptOutcome}
        assert figures.attempts == expected, window
        assert figures.response_ms(50) is None


async def test_percentiles_come_from_the_histogram(db: Database) -> None:
    now = datetime.now(UTC)
    times = list(range(1, 101)) + [1500] * 5 + [40_000]
    await roll_up(
        db, [answered("WH1", now - timedelta(minutes=i % 30), ms) for i, ms in enumerate(times)]
    )
    figures = await stats.read(db, "WH1", now, StatsWindow.HOUR)
    ranked = sorted(times)
    for percent in (50, 95, 99):
        exact = ranked[-(-percent * len(ranked) // 100) - 1]
        value = figures.response_ms(percent)
        assert value is not None and abs(value - exact) <= exact / 10, (percent, value, exact)
    assert figures.response_ms(50) == health.bucket_value(health.bucket_of(53))
    assert sum(figures.histogram) == len(times)


async def test_a_late_result_is_not_counted(
    client: TestClient[Any, Any], ws: Workspace, receiver: Receiver, db: Database
) -> None:
    hook = await subscribe(client, ws, receiver.url("/hook"))
    await publish(client, ws)
    now = datetime.now(UTC)
    claim = await queue.claim(db, owner="engine-a", now=now, limit=10, default_concurrency=10)
    (claimed,) = claim.rows
    # Its engine was taken for dead: the lease went back before the result came.
    await queue.leave(db, owner="engine-a", now=now)
    late = AttemptResult(
        id=claimed.id,
        webhook_id=claimed.webhook_id,
        attempts_before=claimed.attempts,
        response_status=200,
        response_ms=3,
        last_error=None,
        finished_at=now,
        decision=Delivered(now),
        started_at=now,
        outcome=AttemptOutcome.SUCCESS,
        response_body=None,
    )
    await queue.record(db, owner="engine-a", results=[late], now=now, disable_after=1e9)
    figures = await stats_of(client, ws, hook["id"])
    assert figures["attempts"] == NO_ATTEMPTS
    assert figures["lastSuccessAt"] is None
    assert figures["deliveries"] == {"pending": 1, "delivered": 0, "failed": 0}


async def test_concurrent_records_add_up_without_deadlocks(db: Database) -> None:
    """Writers take the same rows in opposite orders within their batches: the rollup locks
    them in key order, so they wait for one another and never deadlock."""
    now = datetime.now(UTC)
    hooks = [f"WH{i}" for i in range(8)]

    async def writer(seed: int) -> None:
        rand = random.Random(seed)
        for _ in range(15):
            batch = [answered(h, now - timedelta(minutes=rand.randrange(3)), 7) for h in hooks]
            rand.shuffle(batch)
            async with db.transaction() as conn:
                await stats.record_batch(conn, batch, [], "engine-a")
                await asyncio.sleep(0)  # hold the locks across a switch to the others

    await asyncio.gather(*(writer(seed) for seed in range(6)))
    for hook in hooks:
        figures = await stats.read(db, hook, now, StatsWindow.HOUR)
        assert figures.attempts[AttemptOutcome.SUCCESS] == 6 * 15
        assert sum(figures.histogram) == 6 * 15


async def test_rollups_leave_with_retention(db: Database) -> None:
    now = datetime.now(UTC)
    old, older = now - timedelta(days=9), now - timedelta(days=40)
    recent = now - timedelta(minutes=5)
    await roll_up(
        db,
        [
            answered("WH1", older, 5, ok=False),
            answered("WH1", old, 5),
            answered("WH1", recent, 5, ok=False),
        ],
    )
    report = await maintenance.run_maintenance(db, now, retention_days=30)
    assert report.ran and report.rollups_deleted == 3  # 2 minutes (9 and 40 days), 1 hour
    async with db.acquire() as conn:
        minutes = await conn.fetchval("SELECT count(*) FROM webhook_stats_minutes")
        hours = await conn.fetchval("SELECT count(*) FROM webhook_stats_hours")
    # Minute rows past the longest window are gone; hour rows stay as long as retention.
    assert (minutes, hours) == (1, 2)
    week = await stats.read(db, "WH1", now, StatsWindow.WEEK)
    assert week.attempts[AttemptOutcome.HTTP_ERROR] == 1
    assert week.attempts[AttemptOutcome.SUCCESS] == 0
    assert week.last_success_at == old  # of any time (within retention)
    assert week.last_failure_at == recent


async def test_each_engine_writes_rows_of_its_own_and_reads_add_them_up(db: Database) -> None:
    """Engines never wait on one another's rollup rows: each has its own, and the figures
    are their sum."""
    now = datetime.now(UTC)
    for engine in ("engine-a", "engine-b", "engine-a"):
        async with db.transaction() as conn:
            await stats.record_batch(conn, [answered("WHx", now, 7)], [], engine)
    async with db.acquire() as conn:
        rows = await conn.fetchval(
            "SELECT count(*) FROM webhook_stats_minutes WHERE webhook_id = 'WHx'"
        )
    assert rows == 2
    figures = await stats.read(db, "WHx", now, StatsWindow.HOUR)
    assert figures.attempts[AttemptOutcome.SUCCESS] == 3
    assert sum(figures.histogram) == 3
    assert figures.last_success_at is not None


# -- attempts per minute (the console's chart) -----------------------------------------------


async def test_attempts_per_minute_over_the_last_hour(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    make_workspace: MakeWorkspace,
    clock: FakeClock,
) -> None:
    """Each of the last 60 minutes, oldest first, with its attempts by outcome, from what the
    engine recorded; a minute without any counts 0 of each."""
    receiver.behaviours["/hook"] = sequence(answer(500), answer(200))
    hook = await subscribe(client, ws, receiver.url("/hook"))
    path = f"/v1/webhooks/{hook['id']}/stats/minutes"
    empty = await get_json(client, ws, path)
    assert len(empty["minutes"]) == 60
    assert all(minute["attempts"] == NO_ATTEMPTS for minute in empty["minutes"])
    now = health.floor_minute(clock.now())
    assert empty["minutes"][-1]["minute"] == isoformat(now)
    assert empty["minutes"][0]["minute"] == isoformat(now - timedelta(minutes=59))

    await publish(client, ws)
    engine = await make_engine(retry_schedule=(90.0,), disable_after=10**8)
    await attempted(client, ws, hook["id"], 1, engine)
    clock.advance(120)  # the retry, two minutes on
    await attempted(client, ws, hook["id"], 2, engine)
    failure, success = reversed(await attempt_log(client, ws, hook["id"]))
    minutes = {m["minute"]: m["attempts"] for m in (await get_json(client, ws, path))["minutes"]}
    assert len(minutes) == 60
    first = isoformat(health.floor_minute(datetime.fromisoformat(failure["createdAt"])))
    second = isoformat(health.floor_minute(datetime.fromisoformat(success["createdAt"])))
    assert minutes[first] == {**NO_ATTEMPTS, "http_error": 1}
    assert minutes[second] == {**NO_ATTEMPTS, "success": 1}
    assert sum(sum(counts.values()) for counts in minutes.values()) == 2

    # An hour later, both have left the window.
    clock.advance(3600)
    later = await get_json(client, ws, path)
    assert all(minute["attempts"] == NO_ATTEMPTS for minute in later["minutes"])

    other = await make_workspace()
    writer = await make_workspace(scopes=["webhooks:write"])
    assert (await client.get(path, headers=other.headers)).status == 404
    assert (await client.get(path, headers=writer.headers)).status == 403
    assert (await client.get(path)).status == 401
    resp = await client.get(f"{path}?window=1h", headers=ws.headers)
    assert resp.status == 400
    assert (await resp.json())["errors"][0]["path"] == "query.window"


async def test_attempts_per_minute_add_up_every_engines_rows(db: Database) -> None:
    now = datetime.now(UTC)
    minute = health.floor_minute(now)
    await roll_up(db, [answered("WH1", now, 5), answered("WH1", now, 5, ok=False)])
    async with db.transaction() as conn:
        await stats.record_batch(conn, [answered("WH1", now, 7)], [], "engine-b")
        await stats.record_batch(conn, [answered("WH2", now, 7)], [], "engine-b")
    counted = await stats.attempts_per_minute(db, "WH1", minute - timedelta(minutes=59))
    assert counted == {
        minute: {**dict.fromkeys(AttemptOutcome, 0), AttemptOutcome.SUCCESS: 2,
                 AttemptOutcome.HTTP_ERROR: 1}
    }  # fmt: skip
    assert await stats.attempts_per_minute(db, "WH1", minute + timedelta(minutes=1)) == {}
