"""The bounds on payload filters' work (docs/webhooks.md, "Payload filters"; docs/api.md,
"Bounds"): every door that takes a filter refuses one past a bound with a 400 naming
`body.filter`, storing nothing; a data array longer than the bound, where a filter has an
array, does not pass, and fan-out (every door), recover and the filter test agree on it; a
filter test at the bounds finishes; the filter step's deadline fails a publish, storing
nothing."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import asyncpg
import orjson
import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.clock import isoformat
from dispatcher.domain.payload_filter import (
    MAX_COMPARED_ARRAY_ELEMENTS,
    MAX_FILTER_ARRAY_ELEMENTS,
    MAX_FILTER_VALUES,
)
from dispatcher.store import webhooks
from dispatcher.store.database import Database
from tests.api.payload_filters import URL, delivered_ids, filter_test, publish, subscribe
from tests.clock import FakeClock
from tests.conftest import Workspace

A = MAX_FILTER_ARRAY_ELEMENTS
V = MAX_FILTER_VALUES
N = MAX_COMPARED_ARRAY_ELEMENTS

# Filters at a bound (accepted) and past it (refused), in several shapes.
AT_BOUNDS: list[dict[str, Any]] = [
    {"tags": list(range(A))},
    {"a": {"b": list(range(A // 2))}, "c": ["x"] * (A - A // 2)},
    {f"k{i}": i for i in range(V)},
    {"k": {"k": {"k": {"k": 1}}}},
]
PAST_BOUNDS: list[dict[str, Any]] = [
    {"tags": list(range(A + 1))},
    {"a": {"b": list(range(A // 2))}, "c": ["x"] * (A - A // 2 + 1)},
    {"k": [0] * 2040},  # the probe's 4 KiB filter
    {f"k{i}": i for i in range(V + 1)},
    {"items": [{"sku": "X"}]},
    {"items": [[1]]},
]


BODY_LIMIT = 1024 * 1024


async def large_filter_test(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, body: dict[str, Any]
) -> Any:
    """A filter test whose body is compact JSON just under the 1 MiB body limit."""
    raw = orjson.dumps(body)
    assert BODY_LIMIT - 100_000 < len(raw) <= BODY_LIMIT, len(raw)
    return await client.post(
        f"/v1/webhooks/{hook_id}/filter/test",
        data=io.BytesIO(raw),
        headers={**ws.headers, "Content-Type": "application/json"},
    )


def deep(levels: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(levels):
        value = {"k": value}
    return dict(value)


PAST_BOUNDS.append(deep(V + 1))


async def test_every_door_refuses_a_filter_past_a_bound_and_stores_nothing(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    kept = await subscribe(client, ws, filter={"kept": True}, name="kept")
    for bad in PAST_BOUNDS:
        create = await client.post(
            "/v1/webhooks",
            json={"url": URL, "events": ["contact.updated"], "filter": bad},
            headers=ws.headers,
        )
        patch = await client.patch(
            f"/v1/webhooks/{kept['id']}", json={"name": "changed", "filter": bad},
            headers=ws.headers,
        )  # fmt: skip
        tried = await filter_test(client, ws, kept["id"], {"data": {"a": 1}, "filter": bad})
        for resp in (create, patch, tried):
            assert resp.status == 400, (bad, await resp.text())
            assert [e["path"] for e in (await resp.json())["errors"]] == ["body.filter"], bad
    listed = (await (await client.get("/v1/webhooks", headers=ws.headers)).json())["data"]
    assert [(h["id"], h["name"], h["filter"]) for h in listed] == [
        (kept["id"], "kept", {"kept": True})
    ]


async def test_every_door_takes_a_filter_at_the_bounds(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for good in AT_BOUNDS:
        hook = await subscribe(client, ws, filter=good)
        assert hook["filter"] == good
        resp = await client.patch(
            f"/v1/webhooks/{hook['id']}", json={"filter": good}, headers=ws.headers
        )
        assert resp.status == 200, await resp.text()
        resp = await filter_test(client, ws, hook["id"], {"data": good, "filter": good})
        assert resp.status == 200, await resp.text()
        assert await resp.json() == {"matches": True}


def data_with(place: str, length: int, *, nested: bool = False, **more: Any) -> dict[str, Any]:
    """Data whose array at `place` (or at `place`.inner) holds `length` elements, the filter's
    one ("vip") last: the one a search finds only at the end."""
    array = [f"t{i}" for i in range(length - 1)] + ["vip"]
    value: Any = {"inner": array} if nested else array
    return {"id": f"{place}-{length}-{nested}", place: value, **more}


@pytest.mark.parametrize("nested", [False, True])
async def test_a_data_array_past_the_bound_does_not_pass_a_filter_looking_into_it(
    client: TestClient[Any, Any], ws: Workspace, db: Database, nested: bool
) -> None:
    wanted: dict[str, Any] = {"tags": {"inner": ["vip"]}} if nested else {"tags": ["vip"]}
    arrays = await subscribe(client, ws, filter=wanted)
    plain = await subscribe(client, ws, filter={"kind": "x"})  # no array: no bound applies
    at, past = (
        data_with("tags", N, nested=nested, kind="x"),
        data_with("tags", N + 1, nested=nested, kind="x"),
    )
    # An unrelated long array elsewhere in the data does not matter.
    elsewhere = {**at, "id": "elsewhere", "other": list(range(10 * N))}
    for data in (at, past, elsewhere):
        await publish(client, ws, data)
    async with db.acquire() as conn:  # the SQL outbox: the same rule
        await conn.fetchval(
            "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
            ws.id, {**past, "id": "outbox-past"},
        )  # fmt: skip
        await conn.fetchval(
            "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
            ws.id, {**at, "id": "outbox-at"},
        )  # fmt: skip
    assert await delivered_ids(db, arrays["id"]) == sorted([at["id"], "elsewhere", "outbox-at"])
    assert len(await delivered_ids(db, plain["id"])) == 5
    # The filter test answers the same, saved filter or given.
    for data, passes in ((at, True), (past, False), (elsewhere, True)):
        resp = await filter_test(client, ws, arrays["id"], {"data": data})
        assert await resp.json() == {"matches": passes}, data["id"]
        resp = await filter_test(client, ws, plain["id"], {"data": data, "filter": wanted})
        assert await resp.json() == {"matches": passes}, data["id"]


async def test_recover_applies_the_data_bound(
    client: TestClient[Any, Any], ws: Workspace, db: Database, clock: FakeClock
) -> None:
    since = isoformat(clock.now() - timedelta(seconds=1))
    hook = await subscribe(client, ws)
    for length in (N, N + 1):  # failed, then recovered only if the filter passes
        await publish(client, ws, data_with("tags", length))
    async with db.acquire() as conn:
        await conn.execute("DELETE FROM delivery_queue")
        await conn.execute("UPDATE deliveries SET status = 'failed', next_attempt_at = NULL")
    resp = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"filter": {"tags": ["vip"]}, "enabled": False},
        headers=ws.headers,
    )  # fmt: skip
    assert resp.status == 200
    for length in (N, N + 1):  # missed while disabled: made only if the filter passes
        await publish(client, ws, {**data_with("tags", length), "id": f"missed-{length}"})
    await client.patch(f"/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=ws.headers)
    resp = await client.post(
        f"/v1/webhooks/{hook['id']}/recover", json={"since": since}, headers=ws.headers
    )
    assert await resp.json() == {"queued": 2}
    listed = await (
        await client.get(f"/v1/webhooks/{hook['id']}/deliveries?status=pending", headers=ws.headers)
    ).json()
    assert sorted(d["payload"]["data"]["id"] for d in listed["data"]) == [
        f"missed-{N}",
        f"tags-{N}-False",
    ]


async def test_a_filter_test_at_the_bounds_with_the_largest_data_finishes(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    """The worst the bounds allow: every filter element found last in a data array at the
    bound, beside as much other data as the 1 MiB body holds (no timing here: benchmarks/,
    scenario 9, times it)."""
    hook = await subscribe(client, ws)
    array = list(range(N))
    wanted = {"tags": array[-A:]}
    data = {"tags": array, "bulk": [0] * 500_000}  # about 1 MB of compact JSON
    resp = await large_filter_test(client, ws, hook["id"], {"data": data, "filter": wanted})
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"matches": True}


async def test_a_filter_test_past_its_time_limit_is_a_503_and_keeps_nothing(
    client: TestClient[Any, Any], ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = await subscribe(client, ws, filter={"a": 1})
    # 1 ms: parsing about 1 MB of JSON into jsonb takes far longer than that.
    monkeypatch.setattr(webhooks, "FILTER_TEST_TIMEOUT", 0.001)
    resp = await large_filter_test(client, ws, hook["id"], {"data": {"bulk": [0] * 500_000}})
    assert resp.status == 503, await resp.text()
    error = await resp.json()
    assert error["code"] == "overloaded" and "time limit" in error["message"]
    assert resp.headers["Retry-After"]
    monkeypatch.undo()
    resp = await filter_test(client, ws, hook["id"], {"data": {"a": 1}})
    assert await resp.json() == {"matches": True}


async def test_the_filter_steps_deadline_fails_the_publish_and_stores_nothing(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """Past the fan-out's deadline (`dispatcher.filter_time_limit`, here negative: already
    past) the outbox call fails as a statement timeout would (57014), and the caller's
    transaction stores nothing of the event; within it, the same call publishes."""
    hook = await subscribe(client, ws, filter={"a": 1})
    unfiltered = await subscribe(client, ws)
    async with db.acquire() as conn:
        with pytest.raises(asyncpg.QueryCanceledError, match="time limit"):
            async with conn.transaction():
                await conn.execute("SET LOCAL dispatcher.filter_time_limit = '-1 s'")
                await conn.fetchval(
                    "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
                    ws.id, {"id": "late", "a": 1},
                )  # fmt: skip
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
        assert await conn.fetchval("SELECT count(*) FROM deliveries") == 0
        async with conn.transaction():
            await conn.execute("SET LOCAL dispatcher.filter_time_limit = '1 min'")
            await conn.fetchval(
                "SELECT dispatcher_publish_event($1, 'contact.updated', $2::jsonb)",
                ws.id, {"id": "in-time", "a": 1},
            )  # fmt: skip
    assert await delivered_ids(db, hook["id"]) == ["in-time"]
    assert await delivered_ids(db, unfiltered["id"]) == ["in-time"]


async def test_each_events_fan_out_has_its_own_deadline(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """The deadline bounds the filter step of one event's fan-out, not the statement that
    publishes it: a statement publishing several events (an outbox caller's bulk insert)
    whose whole run is longer than the limit, each fan-out quick, publishes them all."""
    hook = await subscribe(client, ws, filter={"a": 1})
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL dispatcher.filter_time_limit = '200 ms'")
        await conn.execute(
            "SELECT pg_sleep(0.3), dispatcher_publish_event($1, 'contact.updated',"
            " jsonb_build_object('id', 'e' || g, 'a', 1)) FROM generate_series(1, 3) g",
            ws.id,
        )
    assert sorted(await delivered_ids(db, hook["id"])) == ["e1", "e2", "e3"]


@pytest.mark.parametrize("key", ["a,b", 'c"d', "{e}", "f g", "h\\\\i", "", "NULL", "é"])
async def test_the_data_bound_finds_arrays_under_any_key(
    client: TestClient[Any, Any], ws: Workspace, db: Database, key: str
) -> None:
    """Where a filter's arrays are is kept as the text of a text[] path: keys that need
    quoting in that text (commas, quotes, braces, spaces, backslashes, empty, NULL) still
    lead to their array, saved or given."""
    wanted = {key: {key: ["vip"]}}
    hook = await subscribe(client, ws, filter=wanted)
    async with db.acquire() as conn:
        stored = await conn.fetchval(
            "SELECT payload_filter_arrays FROM webhooks WHERE id = $1", hook["id"]
        )
    assert stored == [path_text(key)]
    for length, passes in ((N, True), (N + 1, False)):
        data = {key: {key: [f"t{i}" for i in range(length - 1)] + ["vip"]}}
        resp = await filter_test(client, ws, hook["id"], {"data": data})
        assert await resp.json() == {"matches": passes}, length
        resp = await filter_test(client, ws, hook["id"], {"data": data, "filter": wanted})
        assert await resp.json() == {"matches": passes}, length


def path_text(key: str) -> str:
    """The text of ARRAY[key, key] as Postgres writes it."""
    needs_quotes = key == "" or key.upper() == "NULL" or any(c in key for c in ',"{}\\ ')
    if not needs_quotes:
        return f"{{{key},{key}}}"
    quoted = '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{{{quoted},{quoted}}}"
