"""A subscription's own policy, as the API takes it: `timeoutSeconds` and `retrySchedule`,
null by default (the global settings), set on create, patched, cleared by null, and refused
out of bounds naming the field."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.domain import endpoints
from tests.conftest import Workspace
from tests.engine.helpers import get_json

URL = "https://hooks.example.com/in"


async def create(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"url": URL, "events": ["contact.updated"], **fields}
    return await client.post("/v1/webhooks", json=body, headers=ws.headers)


def policy(hook: dict[str, Any]) -> tuple[Any, Any]:
    return hook["timeoutSeconds"], hook["retrySchedule"]


async def test_null_by_default_set_patched_and_cleared(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    plain = await (await create(client, ws)).json()
    assert policy(plain) == (None, None)
    assert policy(await get_json(client, ws, f"/v1/webhooks/{plain['id']}")) == (None, None)

    made = await create(client, ws, timeoutSeconds=2.5, retrySchedule=[1, 60, 86400])
    assert made.status == 201, await made.text()
    hook = await made.json()
    assert policy(hook) == (2.5, [1, 60, 86400])
    path = f"/v1/webhooks/{hook['id']}"

    async def patched(body: dict[str, Any]) -> Any:
        resp = await client.patch(path, json=body, headers=ws.headers)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    assert policy(await patched({"name": "kept"})) == (2.5, [1, 60, 86400])  # absent keeps
    assert policy(await patched({"timeoutSeconds": 30})) == (30, [1, 60, 86400])
    assert policy(await patched({"retrySchedule": [5] * 20})) == (30, [5] * 20)
    assert policy(await patched({"timeoutSeconds": None})) == (None, [5] * 20)  # null: global
    assert policy(await patched({"retrySchedule": None})) == (None, None)
    assert policy(await get_json(client, ws, path)) == (None, None)
    listed = (await get_json(client, ws, "/v1/webhooks"))["data"]
    assert {h["id"]: policy(h) for h in listed} == {
        plain["id"]: (None, None),
        hook["id"]: (None, None),
    }


async def test_the_bounds_themselves_are_taken(client: TestClient[Any, Any], ws: Workspace) -> None:
    low = await create(client, ws, timeoutSeconds=endpoints.MIN_TIMEOUT_SECONDS, retrySchedule=[1])
    assert low.status == 201, await low.text()
    assert policy(await low.json()) == (0.1, [1])
    high = await create(client, ws, timeoutSeconds=30, retrySchedule=[86400] * 20)
    assert high.status == 201, await high.text()
    assert policy(await high.json()) == (30, [86400] * 20)


def named(path: str) -> str:
    """The field an error's path names (`body.retrySchedule.3`: its fourth delay)."""
    return re.sub(r"\.\d+$", "", path)


BAD_TIMEOUTS = [0, 0.09, 30.1, 31, -1, "5", True, [5], {"s": 5}]
BAD_SCHEDULES = [
    [],
    [0],
    [1] * 21,
    [86401],
    [1, 0, 5],
    [-5],
    [1.5],
    ["60"],
    [True],
    [None],
    [[1]],
    60,
    "1,2",
    {"0": 1},
]


@pytest.mark.parametrize(
    "field, value",
    [("timeoutSeconds", v) for v in BAD_TIMEOUTS] + [("retrySchedule", v) for v in BAD_SCHEDULES],
)
async def test_bad_values_are_refused_naming_the_field(
    client: TestClient[Any, Any], ws: Workspace, field: str, value: Any
) -> None:
    resp = await create(client, ws, **{field: value})
    assert resp.status == 400, (field, value)
    error = await resp.json()
    assert error["code"] == "validation_error"
    assert {named(e["path"]) for e in error["errors"]} == {f"body.{field}"}, error
    assert (await get_json(client, ws, "/v1/webhooks"))["data"] == []
    hook = await (await create(client, ws, timeoutSeconds=3, retrySchedule=[7])).json()
    resp = await client.patch(f"/v1/webhooks/{hook['id']}", json={field: value}, headers=ws.headers)
    assert resp.status == 400
    paths = {named(e["path"]) for e in (await resp.json())["errors"]}
    assert paths == {f"body.{field}"}
    assert policy(await get_json(client, ws, f"/v1/webhooks/{hook['id']}")) == (3, [7])
