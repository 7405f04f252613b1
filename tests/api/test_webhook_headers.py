"""Custom headers through the API: `headers` returned as they are, `secretHeaders` never (only
`secretHeaderNames`), PATCH replacing each object whole, and every bad input a 400 naming its
field that changes nothing. (That they reach receivers: tests/engine/test_custom_headers.py.)
"""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.conftest import MakeWorkspace, Workspace

URL = "https://hooks.example.com/in"
SECRET_VALUE = "s3cr3t-value-never-returned"
OTHER_SECRET = "another-secret-value-never-returned"


async def create(client: TestClient[Any, Any], ws: Workspace, **fields: Any) -> Any:
    body = {"url": URL, "events": ["message.received"], **fields}
    resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
    text = await resp.text()
    assert resp.status == 201, text
    assert SECRET_VALUE not in text and OTHER_SECRET not in text
    return await resp.json()


async def patch(client: TestClient[Any, Any], ws: Workspace, hook_id: str, body: Any) -> Any:
    resp = await client.patch(f"/v1/webhooks/{hook_id}", json=body, headers=ws.headers)
    text = await resp.text()
    assert SECRET_VALUE not in text and OTHER_SECRET not in text
    return resp


async def stored(db: Database, hook_id: str) -> tuple[Any, Any]:
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT headers, secret_headers FROM webhooks WHERE id = $1", hook_id
        )
    assert row is not None
    return row["headers"], row["secret_headers"]


async def test_headers_are_returned_as_they_are_and_secret_ones_by_name_only(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    headers = {"X-Tenant": "acme", "Accept": "application/json", "X-Empty": ""}
    secrets = {"x-b-token": SECRET_VALUE, "Authorization": OTHER_SECRET, "X-a": SECRET_VALUE}
    hook = await create(client, ws, headers=headers, secretHeaders=secrets)
    assert hook["headers"] == headers
    assert hook["secretHeaderNames"] == ["Authorization", "X-a", "x-b-token"]
    assert "secretHeaders" not in hook
    # Every read: the one, the list, the secret's own endpoint, a PATCH of something else.
    for path in (f"/v1/webhooks/{hook['id']}", "/v1/webhooks", f"/v1/webhooks/{hook['id']}/secret"):
        resp = await client.get(path, headers=ws.headers)
        text = await resp.text()
        assert resp.status == 200 and SECRET_VALUE not in text and OTHER_SECRET not in text
    got = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert got["headers"] == headers
    assert got["secretHeaderNames"] == ["Authorization", "X-a", "x-b-token"]
    renamed = await (await patch(client, ws, hook["id"], {"name": "CRM"})).json()
    assert renamed["headers"] == headers
    assert renamed["secretHeaderNames"] == ["Authorization", "X-a", "x-b-token"]
    assert await stored(db, hook["id"]) == (headers, secrets)


async def test_a_webhook_without_custom_headers(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    hook = await create(client, ws)
    assert hook["headers"] == {} and hook["secretHeaderNames"] == [] and hook["filter"] is None
    nulls = await create(client, ws, headers=None, secretHeaders=None, filter=None)
    assert nulls["headers"] == {} and nulls["secretHeaderNames"] == [] and nulls["filter"] is None


async def test_patch_replaces_each_object_whole_and_null_or_empty_clears_it(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await create(
        client, ws, headers={"X-One": "1", "X-Two": "2"}, secretHeaders={"X-Key": SECRET_VALUE}
    )
    hid = hook["id"]

    async def ok(body: Any) -> Any:
        resp = await patch(client, ws, hid, body)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    # Absent keeps both.
    same = await ok({})
    assert same["headers"] == {"X-One": "1", "X-Two": "2"}
    assert same["secretHeaderNames"] == ["X-Key"]
    # Each object is replaced whole; the other is kept.
    replaced = await ok({"headers": {"X-Three": "3"}})
    assert replaced["headers"] == {"X-Three": "3"} and replaced["secretHeaderNames"] == ["X-Key"]
    replaced = await ok({"secretHeaders": {"X-New": OTHER_SECRET}})
    assert replaced["headers"] == {"X-Three": "3"} and replaced["secretHeaderNames"] == ["X-New"]
    assert await stored(db, hid) == ({"X-Three": "3"}, {"X-New": OTHER_SECRET})
    # A name may move from one object to the other in one PATCH.
    moved = await ok({"headers": {"X-New": "public"}, "secretHeaders": {"X-Three": SECRET_VALUE}})
    assert moved["headers"] == {"X-New": "public"} and moved["secretHeaderNames"] == ["X-Three"]
    # {} and null clear.
    cleared = await ok({"headers": {}, "secretHeaders": None})
    assert cleared["headers"] == {} and cleared["secretHeaderNames"] == []
    await ok({"headers": {"X-A": "a"}, "secretHeaders": {"X-B": SECRET_VALUE}})
    cleared = await ok({"headers": None, "secretHeaders": {}})
    assert cleared["headers"] == {} and cleared["secretHeaderNames"] == []
    assert await stored(db, hid) == ({}, {})


BAD: list[tuple[dict[str, Any], str, str]] = [
    # (fields, path, a word of the message)
    ({"headers": {"X-A": "ok\r\nX-Injected: 1"}}, "body.headers", "CR, LF"),
    ({"secretHeaders": {"X-A": SECRET_VALUE + "\r\nX-Injected: 1"}}, "body.secretHeaders", "LF"),
    ({"headers": {"X-A\r\nX-Injected": "1"}}, "body.headers", "token"),
    ({"headers": {"X-A": "a\x00b"}}, "body.headers", "NUL"),
    ({"secretHeaders": {"X-A": SECRET_VALUE + "\u00e9"}}, "body.secretHeaders", "ASCII"),
    ({"headers": {"\u0425-Api": "1"}}, "body.headers", "token"),  # Cyrillic lookalike
    ({"headers": {"": "1"}}, "body.headers", "empty"),
    ({"headers": {"X Api": "1"}}, "body.headers", "token"),
    ({"headers": {"X-Api:": "1"}}, "body.headers", "token"),
    ({"secretHeaders": {"X-A": " " + SECRET_VALUE}}, "body.secretHeaders", "start or end"),
    ({"secretHeaders": {"X-A": SECRET_VALUE + "\t"}}, "body.secretHeaders", "start or end"),
    ({"headers": {"Webhook-Signature": "v1,forged"}}, "body.headers", "reserved"),
    ({"secretHeaders": {"webhook-anything": "x"}}, "body.secretHeaders", "reserved"),
    ({"headers": {"content-type": "text/plain"}}, "body.headers", "reserved"),
    ({"headers": {"HOST": "evil.example.com"}}, "body.headers", "reserved"),
    ({"headers": {"Content-Length": "0"}}, "body.headers", "reserved"),
    ({"headers": {"Transfer-Encoding": "chunked"}}, "body.headers", "reserved"),
    ({"headers": {"Connection": "close"}}, "body.headers", "reserved"),
    ({"headers": {"User-Agent": "me"}}, "body.headers", "reserved"),
    ({"headers": {"X-Key": "1"}, "secretHeaders": {"x-KEY": SECRET_VALUE}},
     "body.secretHeaders", "case-insensitively"),
    ({"headers": {"X-Key": "1", "x-key": "2"}}, "body.headers", "case-insensitively"),
    ({"headers": {f"X-{i}": "v" for i in range(21)}}, "body.headers", "at most 20"),
    ({"headers": {f"X-{i}": "v" for i in range(10)},
      "secretHeaders": {f"X-S{i}": "v" for i in range(11)}}, "body.secretHeaders", "at most 20"),
    ({"secretHeaders": {"X-Big": "v" * (4097 - 5)}}, "body.secretHeaders", "at most 4096 bytes"),
    ({"headers": {"X-A": "v" * 2044}, "secretHeaders": {"X-B": "v" * 2050}},
     "body.headers", "at most 4096 bytes"),
    ({"headers": {"X-A": 1}}, "body.headers", "string"),
    ({"headers": {"X-A": None}}, "body.headers", "string"),
    ({"headers": ["X-A", "1"]}, "body.headers", "dictionary"),
    ({"secretHeaders": "X-A: 1"}, "body.secretHeaders", "dictionary"),
]  # fmt: skip


def names(error: Any, path: str) -> bool:
    """Whether the error names the field `path` (or a header within it)."""
    return any(e["path"] == path or e["path"].startswith(path + ".") for e in error["errors"])


async def test_bad_headers_are_refused_naming_the_field_and_nothing_is_made(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for fields, path, word in BAD:
        body = {"url": URL, "events": ["message.received"], **fields}
        resp = await client.post("/v1/webhooks", json=body, headers=ws.headers)
        text = await resp.text()
        assert resp.status == 400, (fields, text)
        error = await resp.json()
        assert error["code"] == "validation_error"
        assert names(error, path), (fields, error)
        assert word in error["message"], (fields, error)
        assert SECRET_VALUE not in text
    listed = await (await client.get("/v1/webhooks", headers=ws.headers)).json()
    assert listed["data"] == []


async def test_bad_headers_in_a_patch_change_nothing(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await create(client, ws, name="kept", headers={"X-Kept": "1"},
                        secretHeaders={"X-Kept-Secret": SECRET_VALUE})  # fmt: skip
    before = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    for fields, path, word in BAD:
        # Beside a valid change, which must not be applied either.
        resp = await patch(client, ws, hook["id"], {"name": "changed", **fields})
        assert resp.status == 400, (fields, await resp.text())
        error = await resp.json()
        assert names(error, path), (fields, error)
        assert word in error["message"], (fields, error)
    after = await (await client.get(f"/v1/webhooks/{hook['id']}", headers=ws.headers)).json()
    assert after == before
    assert await stored(db, hook["id"]) == ({"X-Kept": "1"}, {"X-Kept-Secret": SECRET_VALUE})


async def test_a_patch_of_one_object_is_checked_with_the_stored_other(
    client: TestClient[Any, Any], ws: Workspace, db: Database
) -> None:
    hook = await create(
        client, ws, headers={f"X-{i}": "v" for i in range(15)},
        secretHeaders={"Authorization": SECRET_VALUE, "X-Big": "v" * 3000},
    )  # fmt: skip
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"headers": {"authorization": "public"}}, "body.headers", "case-insensitively"),
        ({"secretHeaders": {"x-1": SECRET_VALUE}}, "body.secretHeaders", "case-insensitively"),
        ({"headers": {f"X-{i}": "v" for i in range(19)}}, "body.headers", "at most 20"),
        ({"secretHeaders": {f"X-S{i}": "v" for i in range(6)}}, "body.secretHeaders",
         "at most 20"),
        ({"headers": {"X-Huge": "v" * 1100}}, "body.headers", "at most 4096 bytes"),
    ]  # fmt: skip
    for fields, path, word in cases:
        resp = await patch(client, ws, hook["id"], fields)
        assert resp.status == 400, (fields, await resp.text())
        error = await resp.json()
        assert [e["path"] for e in error["errors"]] == [path], error
        assert word in error["message"]
    assert (await stored(db, hook["id"]))[1] == {"Authorization": SECRET_VALUE, "X-Big": "v" * 3000}
    # Freed room on one side makes room for the other, in one PATCH.
    resp = await patch(
        client, ws, hook["id"],
        {"headers": {"authorization": "public"}, "secretHeaders": {"X-Other": SECRET_VALUE}},
    )  # fmt: skip
    assert resp.status == 200, await resp.text()


async def test_another_workspaces_webhook_is_not_found(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace, db: Database
) -> None:
    other = await make_workspace()
    theirs = await create(client, other, secretHeaders={"X-Key": SECRET_VALUE})
    bodies: list[dict[str, Any]] = [
        {"headers": {"X-A": "1"}},
        {"secretHeaders": {}},
        {"headers": {"Host": "x"}},
    ]
    for body in bodies:
        resp = await patch(client, ws, theirs["id"], body)
        assert resp.status == 404, body
    assert await stored(db, theirs["id"]) == ({}, {"X-Key": SECRET_VALUE})
