"""One JSON rule on every door (docs/api.md "JSON values"): free-form values nest at most 64
levels and hold no number beyond 64-bit integers. Each door that takes such a value is tried
with the class, not one example: depths around the limit, around orjson's 254, and far
beyond (objects and arrays); refused ones answer 400 naming the field and store nothing, and
everything accepted reads back through every GET and list that shows it."""

from __future__ import annotations

import io
from typing import Any

import asyncpg
import orjson
import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain.json_values import MAX_JSON_DEPTH, MAX_NUMBER, MIN_NUMBER
from dispatcher.store.database import Database, StoreError
from tests.conftest import Workspace

DEPTHS = [
    MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 252, 253, 254, 255, 256, 1000,
    100_000,
]  # fmt: skip
SHAPES = ["object", "array"]
URL = "https://hooks.example.com/in"


def nested(depth: int, shape: str, first: bytes = b"") -> bytes:
    """A JSON object `depth` levels deep: `{"k": {"k": ... 1}}`, or one object around arrays
    (`{"k": [[...[1]]]}`); `first` are members put before `k` in the outer object."""
    opening, closing = (b'{"k":', b"}") if shape == "object" else (b"[", b"]")
    inner = opening * (depth - 1) + b"1" + closing * (depth - 1)
    return b"{" + first + b'"k":' + inner + b"}"


def test_nested_builds_the_depth_it_names() -> None:
    for shape in SHAPES:
        for depth in (1, 2, 5, 64):
            value = orjson.loads(nested(depth, shape))
            levels = 0
            while isinstance(value, dict | list):
                levels += 1
                value = value["k"] if isinstance(value, dict) else value[0]
            assert levels == depth, (shape, depth)


async def post(client: TestClient[Any, Any], ws: Workspace, path: str, body: bytes) -> Any:
    headers = {**ws.headers, "Content-Type": "application/json"}
    return await client.post(path, data=io.BytesIO(body), headers=headers)


async def counts(db: Database) -> tuple[int, int, int]:
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM webhooks) w, (SELECT count(*) FROM events) e, "
            "(SELECT count(*) FROM webhooks WHERE payload_filter IS NOT NULL) f"
        )
    assert row is not None
    return row["w"], row["e"], row["f"]


async def refused(resp: Any, path: str, words: str) -> None:
    body = await resp.json()
    assert resp.status == 400, body
    assert body["code"] == "validation_error", body
    assert [e["path"] for e in body["errors"]] == [path], body
    assert words in body["errors"][0]["message"], body


async def make_hook(client: TestClient[Any, Any], ws: Workspace) -> str:
    resp = await client.post(
        "/v1/webhooks", json={"url": URL, "events": ["contact.updated"]}, headers=ws.headers
    )
    assert resp.status == 201
    return str((await resp.json())["id"])


@pytest.mark.parametrize("shape", SHAPES)
async def test_every_api_door_takes_the_limit_and_refuses_deeper(
    client: TestClient[Any, Any], ws: Workspace, db: Database, shape: str
) -> None:
    hook_id = await make_hook(client, ws)
    for depth in DEPTHS:
        data = nested(depth, shape, b'"id":"d%d",' % depth)
        value = nested(depth, shape)
        doors = [
            ("/v1/events", b'{"type":"contact.updated","data":' + data + b"}", "body.data", 202),
            (
                "/v1/events/batch",
                b'{"events":[{"type":"contact.updated","data":{"id":"x"}},'
                b'{"type":"contact.updated","data":' + data + b"}]}",
                "body.events[1].data",
                202,
            ),
            (
                "/v1/webhooks",
                b'{"url":"%s","events":["contact.updated"],"filter":' % URL.encode() + value + b"}",
                "body.filter",
                201,
            ),
            (f"/v1/webhooks/{hook_id}/filter/test", b'{"data":' + data + b"}", "body.data", 200),
            (
                f"/v1/webhooks/{hook_id}/filter/test",
                b'{"data":{"id":"x"},"filter":' + value + b"}",
                "body.filter",
                200,
            ),
        ]
        for path, body, field, accepted in doors:
            before = await counts(db)
            resp = await post(client, ws, path, body)
            if depth <= MAX_JSON_DEPTH:
                assert resp.status == accepted, (path, depth, await resp.text())
                await resp.read()
            else:
                await refused(resp, field, f"at most {MAX_JSON_DEPTH} levels")
                assert await counts(db) == before, (path, depth)
        # PATCH: a refused filter leaves the stored one as it was.
        resp = await client.patch(
            f"/v1/webhooks/{hook_id}",
            data=io.BytesIO(b'{"filter":' + value + b"}"),
            headers={**ws.headers, "Content-Type": "application/json"},
        )
        if depth <= MAX_JSON_DEPTH:
            assert resp.status == 200, (depth, await resp.text())
            assert (await resp.json())["filter"] == orjson.loads(value)
        else:
            await refused(resp, "body.filter", f"at most {MAX_JSON_DEPTH} levels")
            got = await (await client.get(f"/v1/webhooks/{hook_id}", headers=ws.headers)).json()
            assert got["filter"] == orjson.loads(nested(MAX_JSON_DEPTH, shape))


NUMBERS: list[tuple[bytes, bool]] = [
    (str(MAX_NUMBER).encode(), True),
    (str(MIN_NUMBER).encode(), True),
    (b"1.5", True),
    (b"-0.25e3", True),
    (b"1e-400", True),  # a double's underflow: 0.0, a number still
    (str(MAX_NUMBER + 1).encode(), False),  # 2^64: was read as 1.8446744073709552e+19
    (str(MIN_NUMBER - 1).encode(), False),
    (b"123456789012345678901234567890", False),
    (b"1e400", False),
    (b"-1e400", False),
    (b"1e300", False),
]


async def test_numbers_beyond_64_bits_are_refused_and_the_rest_kept_exactly(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook_id = await make_hook(client, ws)
    for literal, accepted in NUMBERS:
        data = b'{"id":"n","phone":"12345678901234567890","n":[0,' + literal + b"]}"
        doors = [
            ("/v1/events", b'{"type":"contact.updated","data":' + data + b"}", "body.data.n.1"),
            (
                "/v1/events/batch",
                b'{"events":[{"type":"contact.updated","data":' + data + b"}]}",
                "body.events.0.data.n.1",
            ),
            (
                "/v1/webhooks",
                b'{"url":"%s","events":["contact.updated"],"filter":' % URL.encode() + data + b"}",
                "body.filter.n.1",
            ),
            (f"/v1/webhooks/{hook_id}/filter/test", b'{"data":' + data + b"}", "body.data.n.1"),
        ]
        for path, body, field in doors:
            before = await counts(db)
            resp = await post(client, ws, path, body)
            if not accepted:
                await refused(resp, field, "64-bit integers")
                assert await counts(db) == before, (path, literal)
                continue
            assert resp.status in (200, 201, 202), (path, literal, await resp.text())
            answer = await resp.json()
            if path == "/v1/events":
                got = await client.get(f"/v1/events/{answer['id']}", headers=ws.headers)
                assert (await got.json())["data"]["n"][1] == orjson.loads(literal), literal


async def outbox(url: str, ws: Workspace, data: bytes) -> str:
    """Publish as an application does: its own connection, in its own transaction."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            event_id = await conn.fetchval(
                "SELECT dispatcher_publish_event($1, 'contact.updated', $2::text::jsonb)",
                ws.id,
                data.decode(),
            )
    finally:
        await conn.close()
    return str(event_id)


@pytest.mark.parametrize("shape", SHAPES)
async def test_the_sql_outbox_applies_the_same_rule(
    client: TestClient[Any, Any], ws: Workspace, db: Database, database_url: str, shape: str
) -> None:
    for depth in DEPTHS:
        data = nested(depth, shape, b'"id":"d",')
        before = await counts(db)
        if depth <= MAX_JSON_DEPTH:
            event_id = await outbox(database_url, ws, data)
            got = await client.get(f"/v1/events/{event_id}", headers=ws.headers)
            assert got.status == 200
            assert (await got.json())["data"] == orjson.loads(data)
            continue
        with pytest.raises(asyncpg.PostgresError) as raised:
            await outbox(database_url, ws, data)
        if depth < 1000:  # deeper, Postgres' own parser gives up first (stack depth)
            assert raised.value.sqlstate == "22023", (depth, raised.value)
            assert f"data must nest at most {MAX_JSON_DEPTH} levels deep" in str(raised.value)
        assert await counts(db) == before
    if shape == "array":
        return
    for literal, accepted in NUMBERS:
        if literal in (b"1e400", b"-1e400"):
            literal = literal.replace(b"e400", b"e4000")  # jsonb holds 1e400 exactly
        data = b'{"id":"n","n":[0,' + literal + b"]}"
        if accepted:
            event_id = await outbox(database_url, ws, data)
            got = await client.get(f"/v1/events/{event_id}", headers=ws.headers)
            assert got.status == 200
            continue
        with pytest.raises(asyncpg.PostgresError) as raised:
            await outbox(database_url, ws, data)
        assert raised.value.sqlstate == "22023", (literal, raised.value)
        assert "64-bit integers" in str(raised.value)


async def read_everything(
    client: TestClient[Any, Any], ws: Workspace, hook_id: str, event_ids: list[str]
) -> None:
    """Every GET and list that shows a webhook or an event answers 200 (the console's pages
    are drawn from these same answers)."""
    paths = [
        "/v1/webhooks",
        f"/v1/webhooks/{hook_id}",
        f"/v1/webhooks/{hook_id}/deliveries",
        "/v1/events",
        *(f"/v1/events/{event_id}" for event_id in event_ids),
        *(f"/v1/events/{event_id}/deliveries" for event_id in event_ids),
    ]
    deliveries = await client.get(f"/v1/webhooks/{hook_id}/deliveries", headers=ws.headers)
    for item in (await deliveries.json())["data"]:
        paths.append(f"/v1/webhooks/{hook_id}/deliveries/{item['id']}")
        paths.append(f"/v1/webhooks/{hook_id}/deliveries/{item['id']}/attempts")
    assert len(paths) > 10
    for path in paths:
        resp = await client.get(path, headers=ws.headers)
        assert resp.status == 200, (path, await resp.text())
        await resp.json()


@pytest.mark.parametrize("shape", SHAPES)
async def test_everything_accepted_reads_back_everywhere(
    client: TestClient[Any, Any], ws: Workspace, database_url: str, shape: str
) -> None:
    """The largest values each door takes: a filter and event data at the depth limit (and
    numbers at the range's ends), through the API and the outbox."""
    extremes = b'"id":"e","lo":%d,"hi":%d,' % (MIN_NUMBER, MAX_NUMBER)
    data = nested(MAX_JSON_DEPTH, shape, extremes)
    hook = await post(
        client,
        ws,
        "/v1/webhooks",
        b'{"url":"%s","events":["contact.updated"],"filter":' % URL.encode()
        + nested(MAX_JSON_DEPTH, shape)
        + b"}",
    )
    assert hook.status == 201, await hook.text()
    hook_id = (await hook.json())["id"]
    published = await post(
        client, ws, "/v1/events", b'{"type":"contact.updated","data":' + data + b"}"
    )
    assert published.status == 202, await published.text()
    via_api = (await published.json())["id"]
    via_outbox = await outbox(database_url, ws, data)
    got = await client.get(f"/v1/events/{via_api}", headers=ws.headers)
    assert (await got.json())["data"] == orjson.loads(data)
    listed = await client.get(f"/v1/webhooks/{hook_id}/deliveries", headers=ws.headers)
    assert len((await listed.json())["data"]) == 2  # the filter matched both events
    await read_everything(client, ws, hook_id, [via_api, via_outbox])


async def test_an_answer_that_cannot_be_rendered_commits_nothing(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    """The class "no 500 after a commit": a write renders its answer before it commits. A
    filter stored before the rule existed, 300 levels deep (no serialiser writes it), makes
    the answer of a PATCH fail: the PATCH then changes nothing."""
    hook_id = await make_hook(client, ws)
    too_deep = b'{"k":' * 299 + b"{}" + b"}" * 299
    async with db.acquire() as conn:
        await conn.execute(
            "UPDATE webhooks SET payload_filter = $2::text::jsonb WHERE id = $1",
            hook_id,
            too_deep.decode(),
        )
    resp = await client.patch(
        f"/v1/webhooks/{hook_id}", json={"name": "renamed"}, headers=ws.headers
    )
    assert resp.status == 500
    async with db.acquire() as conn:
        name = await conn.fetchval("SELECT name FROM webhooks WHERE id = $1", hook_id)
    assert name is None


async def test_a_value_the_driver_cannot_encode_is_not_quoted_in_the_error(db: Database) -> None:
    """The error (and so the log line of a 500) names the argument, never its value: the
    value is request data."""
    with pytest.raises(StoreError) as raised:
        async with db.acquire() as conn:
            await conn.fetchval("SELECT $1::int", "private-request-data")
    assert "private-request-data" not in str(raised.value)
    assert "query argument $1" in str(raised.value)
