"""The OpenAPI document says what the service does, because both come from one declaration
per route (api/framework/routing.py: method, path, credential, answer, body, query): each documented
scope is the one the route enforces, each documented body the one it validates, each
documented filter value one it takes. And the workspace's numbers are checked the same way at
every door."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.api.framework.context import SCOPES
from dispatcher.api.framework.openapi import ANY_KEY
from dispatcher.api.registry import document
from dispatcher.domain.enums import ALSO_GRANTED_BY, Scope
from dispatcher.store.database import Database
from tests.conftest import ADMIN_HEADERS, MakeWorkspace, Workspace

DOCUMENT = document()
OPERATIONS = [
    (method, path, operation)
    for path, operations in DOCUMENT["paths"].items()
    for method, operation in operations.items()
]


def cases(keep: str, *, admin: bool = True) -> list[Any]:
    """The operations that have `keep` (set and not empty), one test case each; the admin
    API's too unless `admin` is false."""
    return [
        pytest.param(method, path, operation, id=f"{method} {path}")
        for method, path, operation in OPERATIONS
        if operation.get(keep) and (admin or not is_admin(operation))
    ]


def is_admin(operation: dict[str, Any]) -> bool:
    """An admin API route: the admin token, not a workspace key (tests/api/test_admin.py)."""
    return "admin" in operation.get("tags", ())


def scoped() -> list[Any]:
    """The keyed operations that require a scope (not those open to any key, GET /v1/me)."""
    return [
        case for case in cases("security", admin=False) if case.values[2]["description"] != ANY_KEY
    ]


NOT_OURS = "not one of the workspace's numbers"


def documented_scope(operation: dict[str, Any]) -> str:
    found = re.match(r"Scope: `([a-z]+:[a-z]+)`\.", operation["description"])
    assert found is not None, operation["description"]
    return found[1]


# Path parameters that are not ids, with a value that exists (the event catalog is fixed).
NOT_IDS = {"event_type": "call.missed"}


def concrete(path: str) -> str:
    """A path for a template, with ids that exist nowhere: the checks tried here come first."""
    return re.sub(r"\{(\w+)\}", lambda m: NOT_IDS.get(m[1], "XX" + "0" * 32), path)


def component(ref: dict[str, str]) -> dict[str, Any]:
    name = ref["$ref"].rsplit("/", 1)[1]
    schema: dict[str, Any] = DOCUMENT["components"]["schemas"][name]
    return schema


async def count(db: Database, table: str) -> int:
    async with db.acquire() as conn:
        found: int = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return found


def test_the_document_names_every_schema_it_refers_to() -> None:
    """Every `$ref` resolves, whatever pydantic named the definition (Page[Message] is listed
    as MessagePage)."""
    text = repr(DOCUMENT)
    refs = set(re.findall(r"#/components/schemas/([A-Za-z0-9_]+)", text))
    assert refs <= set(DOCUMENT["components"]["schemas"]), refs
    assert {"MessagePage", "ConversationPage", "WebhookPage", "DeliveryPage"} <= refs
    delivery = DOCUMENT["components"]["schemas"]["Delivery"]["properties"]
    assert delivery["payload"] == {"$ref": "#/components/schemas/EventEnvelope"}
    assert set(DOCUMENT["components"]["schemas"]["Direction"]["enum"]) == {"incoming", "outgoing"}


@pytest.mark.parametrize(("method", "path", "operation"), scoped())
async def test_each_route_requires_the_scope_it_documents(
    client: TestClient[Any, Any],
    make_workspace: MakeWorkspace,
    method: str,
    path: str,
    operation: dict[str, Any],
) -> None:
    scope = documented_scope(operation)
    assert scope in SCOPES
    # Without it, and without the scope that also grants it (webhooks:read reads events).
    also = ALSO_GRANTED_BY.get(Scope(scope))
    without = await make_workspace(scopes=sorted(set(SCOPES) - {scope, also}))
    resp = await client.request(method.upper(), concrete(path), headers=without.headers)
    assert resp.status == 403, await resp.text()
    assert scope in (await resp.json())["message"]
    only = await make_workspace(scopes=[scope])
    resp = await client.request(method.upper(), concrete(path), headers=only.headers)
    assert resp.status not in (401, 403), await resp.text()


@pytest.mark.parametrize(
    ("method", "path", "operation"),
    [case for case in cases("security") if case.values[2]["description"] == ANY_KEY],
)
async def test_a_route_open_to_any_key_takes_a_key_with_any_one_scope(
    client: TestClient[Any, Any],
    make_workspace: MakeWorkspace,
    method: str,
    path: str,
    operation: dict[str, Any],
) -> None:
    for scope in sorted(SCOPES):
        only = await make_workspace(scopes=[scope])
        resp = await client.request(method.upper(), concrete(path), headers=only.headers)
        assert resp.status == 200, (scope, await resp.text())
    assert (await client.request(method.upper(), concrete(path))).status == 401


@pytest.mark.parametrize(("method", "path", "operation"), cases("requestBody"))
async def test_each_route_validates_the_body_it_documents(
    client: TestClient[Any, Any], ws: Workspace, method: str, path: str, operation: dict[str, Any]
) -> None:
    """An empty object is refused naming exactly the documented required fields, and a field
    the document does not list is refused as unknown."""
    schema = component(operation["requestBody"]["content"]["application/json"]["schema"])
    assert schema["additionalProperties"] is False
    required = schema.get("required", [])
    url = concrete(path)
    headers = ADMIN_HEADERS if is_admin(operation) else ws.headers
    if required:
        resp = await client.request(method.upper(), url, json={}, headers=headers)
        assert resp.status == 400, await resp.text()
        errors = (await resp.json())["errors"]
        assert [e["path"] for e in errors] == [f"body.{name}" for name in required]
        assert {e["message"] for e in errors} == {"field required"}
    assert "undocumented" not in schema["properties"]
    resp = await client.request(method.upper(), url, json={"undocumented": 1}, headers=headers)
    assert resp.status == 400, await resp.text()
    assert {"path": "body.undocumented", "message": "unknown field"} in (await resp.json())[
        "errors"
    ]


@pytest.mark.parametrize(("method", "path", "operation"), cases("requestBody"))
async def test_a_body_is_read_after_the_credential_and_before_the_path_is_looked_up(
    client: TestClient[Any, Any],
    make_workspace: MakeWorkspace,
    method: str,
    path: str,
    operation: dict[str, Any],
) -> None:
    """A request wrong twice gets the first refusal of: the credential (401), the scope or the
    kind of credential (403), the body (400), and only then what the path names (404)."""
    url, broken, json_type = concrete(path), b"{", {"Content-Type": "application/json"}
    resp = await client.request(method.upper(), url, data=broken, headers=json_type)
    if not operation["security"]:
        # A route without a credential (a portal link's exchange): the body comes first.
        assert resp.status == 400, await resp.text()
        assert (await resp.json())["code"] == "invalid_json"
        return
    assert resp.status == 401, await resp.text()
    if is_admin(operation):
        wrong, right = (await make_workspace()).headers, ADMIN_HEADERS
    else:
        scope = documented_scope(operation)
        lacking = sorted(set(SCOPES) - {scope, ALSO_GRANTED_BY.get(Scope(scope))})
        wrong = (await make_workspace(scopes=lacking)).headers
        right = (await make_workspace(scopes=[scope])).headers
    for headers, status in ((wrong, 403), (right, 400)):
        sent = {**json_type, **headers}
        resp = await client.request(method.upper(), url, data=broken, headers=sent)
        assert resp.status == status, await resp.text()
    assert (await resp.json())["code"] == "invalid_json"


async def test_a_header_is_checked_before_the_body(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    """`POST /v1/events` parses its body itself, after `Idempotency-Key`."""
    headers = {**ws.headers, "Content-Type": "application/json", "Idempotency-Key": "a b"}
    resp = await client.post("/v1/events", data=b"{", headers=headers)
    assert resp.status == 400, await resp.text()
    assert [e["path"] for e in (await resp.json())["errors"]] == ["header.Idempotency-Key"]


FILTERS = [
    pytest.param(path, parameter, id=f"{path}?{parameter['name']}")
    for method, path, operation in OPERATIONS
    for parameter in operation["parameters"]
    if method == "get" and parameter["in"] == "query" and "enum" in parameter["schema"]
]


@pytest.mark.parametrize(("path", "parameter"), FILTERS)
async def test_each_filter_takes_exactly_the_values_it_documents(
    client: TestClient[Any, Any], ws: Workspace, path: str, parameter: dict[str, Any]
) -> None:
    created = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/", "events": ["call.missed"]},
        headers=ws.headers,
    )
    url = path.replace("{webhook_id}", (await created.json())["id"])
    name, values = parameter["name"], parameter["schema"]["enum"]
    for value in values:
        resp = await client.get(url, params={name: value}, headers=ws.headers)
        assert resp.status == 200, (value, await resp.text())
    resp = await client.get(url, params={name: "sideways"}, headers=ws.headers)
    assert resp.status == 400
    (error,) = (await resp.json())["errors"]
    assert error == {"path": f"query.{name}", "message": f"must be one of: {', '.join(values)}"}


async def test_a_number_is_checked_alike_at_every_door(
    client: TestClient[Any, Any], ws: Workspace, make_workspace: MakeWorkspace, db: Database
) -> None:
    """Another workspace's number, by id or in E.164, is refused with the same message by each
    field that names a number, and nothing is written."""
    other = await make_workspace()
    hook = await client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/", "events": ["call.missed"]},
        headers=ws.headers,
    )
    hook_id = (await hook.json())["id"]
    text = {"text": "hello"}
    contact = {"type": "contact.updated", "data": {"id": "c1"}}
    doors: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "/v1/messages", {"from": other.number, "to": "+15555550199", **text}, "from"),
        ("POST", "/v1/messages", {"from": other.number_id, "to": "+15555550199", **text}, "from"),
        ("POST", "/v1/inbound/messages",
         {"from": "+15555550199", "to": other.number, **text}, "to"),
        ("POST", "/v1/inbound/calls",
         {"from": "+15555550199", "to": other.number, "status": "missed"}, "to"),
        ("POST", "/v1/inbound/calls",
         {"from": other.number, "to": "+15555550199", "status": "missed"}, "to"),
        ("POST", "/v1/webhooks",
         {"url": "https://hooks.example.com/", "events": ["call.missed"],
          "numberIds": [ws.number_id, other.number_id]}, "numberIds"),
        ("PATCH", f"/v1/webhooks/{hook_id}", {"numberIds": [other.number_id]}, "numberIds"),
        # numberIds and numberId take ids only: the E.164 form is not a number id.
        ("PATCH", f"/v1/webhooks/{hook_id}", {"numberIds": [ws.number]}, "numberIds"),
        ("POST", "/v1/events", {**contact, "numberId": other.number_id}, "numberId"),
        ("POST", "/v1/events", {**contact, "numberId": ws.number}, "numberId"),
    ]  # fmt: skip
    tables = ("messages", "calls", "webhooks", "events", "conversations")
    before = [await count(db, table) for table in tables]
    for method, path, body, field in doors:
        resp = await client.request(method, path, json=body, headers=ws.headers)
        assert resp.status == 400, (path, body, await resp.text())
        (error,) = (await resp.json())["errors"]
        assert error["path"] == f"body.{field}", (path, body)
        assert error["message"].startswith(NOT_OURS), error
        assert ws.number_id not in error["message"], "only the refs that are not are named"
    assert [await count(db, table) for table in tables] == before
    unchanged = await client.get(f"/v1/webhooks/{hook_id}", headers=ws.headers)
    assert (await unchanged.json())["numberIds"] is None


async def test_the_workspaces_own_number_is_taken_by_id_or_e164(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    for ref in (ws.number, ws.number_id):
        resp = await client.post(
            "/v1/messages",
            json={"from": ref, "to": "+15555550199", "text": "hi"},
            headers=ws.headers,
        )
        assert resp.status == 202, await resp.text()
        sent = await resp.json()
        assert sent["from"] == ws.number and sent["numberId"] == ws.number_id
    # A call is incoming when `to` is ours, outgoing when only `from` is.
    for body, direction in (
        ({"from": "+15555550199", "to": ws.number}, "incoming"),
        ({"from": ws.number, "to": "+15555550199"}, "outgoing"),
    ):
        resp = await client.post(
            "/v1/inbound/calls", json={**body, "status": "completed"}, headers=ws.headers
        )
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["direction"] == direction
