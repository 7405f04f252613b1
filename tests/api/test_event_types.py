"""The event catalog (docs/events.md, "Catalog"): `GET /v1/event-types` lists every type a
delivery can carry with its description, the JSON Schema (2020-12) of its `data` and an
example; the OpenAPI document shows the same under its top-level `webhooks`. The schemas are
pydantic's of the types the builders are held to (domain/catalog.py), so they cannot drift:
here each example validates against its schema, and one event of every type, made by the
service as it makes them, reaches a real receiver and validates too (the `receiver` fixture
checks every delivery of the suite the same way: tests/catalog_check.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from dispatcher.api.framework.context import Services
from dispatcher.api.registry import document
from dispatcher.carrier import SANDBOX_FAILING_NUMBERS, SandboxCarrier
from dispatcher.domain.catalog import CATALOG, ApplicationEventData
from dispatcher.domain.enums import CallStatus, Scope
from dispatcher.domain.events import EVENT_TYPES, OPERATIONAL_TYPES, TEST_EVENT
from dispatcher.store.database import Database
from tests.catalog_check import body_problems, envelope_problems, validators
from tests.conftest import MakeWorkspace, Workspace, wait_for
from tests.receiver import EngineFactory, Receiver, answer, sequence

DOCS = Path(__file__).resolve().parents[2] / "docs"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
NAMES = [entry.name for entry in CATALOG]


async def get(client: TestClient[Any, Any], path: str, ws: Workspace) -> Any:
    resp = await client.get(path, headers=ws.headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_every_type_a_delivery_can_carry_is_listed_with_schema_and_example(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    listed = await get(client, "/v1/event-types", ws)
    assert set(listed) == {"data", "nextCursor"} and listed["nextCursor"] is None
    assert [item["name"] for item in listed["data"]] == NAMES
    assert set(NAMES) == EVENT_TYPES | {TEST_EVENT} and len(NAMES) == len(set(NAMES))
    for item in listed["data"]:
        assert set(item) == {"name", "description", "schema", "example"}
        assert item["description"]
        assert item["schema"]["$schema"] == DIALECT
        assert item["schema"]["type"] == "object"
        Draft202012Validator.check_schema(item["schema"])
        # The example validates against the schema published beside it.
        errors = list(Draft202012Validator(item["schema"]).iter_errors(item["example"]))
        assert not errors, (item["name"], [e.message for e in errors])
        assert isinstance(item["example"]["id"], str)


async def test_the_schemas_are_the_builders_types(
    client: TestClient[Any, Any], ws: Workspace
) -> None:
    by_name = {item["name"]: item for item in (await get(client, "/v1/event-types", ws))["data"]}
    message = by_name["message.received"]["schema"]
    assert message["title"] == "Message"
    assert set(message["required"]) == {
        "id", "createdAt", "direction", "from", "to", "text", "media", "numberId",
        "conversationId", "status", "expunged",
    }  # fmt: skip
    assert message["properties"]["text"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert by_name["call.missed"]["schema"]["title"] == "Call"
    assert by_name["call.missed"]["example"]["status"] == "missed"
    disabled = by_name["webhook.disabled"]["schema"]
    assert set(disabled["required"]) == {"id", "reason", "disabledAt"}
    # Only the operator sink's copy has it.
    assert "workspaceId" in disabled["properties"]
    assert disabled["properties"]["reason"] == {"$ref": "#/$defs/DisabledReason"}
    assert disabled["$defs"]["DisabledReason"]["enum"] == ["manual", "failing", "gone"]
    # What the application publishes is its own: an object with a string id, the rest free.
    contact = by_name["contact.updated"]["schema"]
    assert contact["required"] == ["id"] and "additionalProperties" not in contact
    assert not list(validators()["contact.updated"].iter_errors({"id": "CT1", "any": [1, {}]}))
    assert list(validators()["contact.updated"].iter_errors({"name": "no id"}))
    assert by_name["webhook.test"]["schema"]["required"] == ["id"]


@pytest.mark.parametrize("scope", list(Scope))
async def test_any_valid_key_may_read_it_and_no_key_may_not(
    client: TestClient[Any, Any], make_workspace: MakeWorkspace, scope: Scope
) -> None:
    only = await make_workspace(scopes=[scope.value])
    assert len((await get(client, "/v1/event-types", only))["data"]) == len(NAMES)
    assert (await client.get("/v1/event-types")).status == 401
    assert (await client.get("/v1/event-types/call.missed")).status == 401


async def test_one_type_by_name(client: TestClient[Any, Any], ws: Workspace) -> None:
    listed = (await get(client, "/v1/event-types", ws))["data"]
    for item in listed:
        assert await get(client, f"/v1/event-types/{item['name']}", ws) == item
    for unknown in ("order.paid_late", "nope", "WH" + "0" * 32):
        resp = await client.get(f"/v1/event-types/{unknown}", headers=ws.headers)
        assert resp.status == 404, unknown
        assert (await resp.json())["code"] == "not_found"


def test_the_openapi_document_lists_them_as_webhooks() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1.")
    # Valid by the OpenAPI 3.1 specification's schema, `webhooks` included.
    validate(doc)
    assert list(doc["webhooks"]) == NAMES
    schemas = doc["components"]["schemas"]
    for entry in CATALOG:
        operation = doc["webhooks"][entry.name]["post"]
        assert operation["description"] == entry.description
        assert [p["name"] for p in operation["parameters"]] == [
            "webhook-id", "webhook-timestamp", "webhook-signature",
        ]  # fmt: skip
        content = operation["requestBody"]["content"]["application/json"]
        # The envelope's schema, its components shared with the paths' (resolved here the
        # way a reader of the document resolves them).
        schema = {"$schema": DIALECT, "components": doc["components"], **content["schema"]}
        validator = Draft202012Validator(schema)
        assert not list(validator.iter_errors(content["example"])), entry.name
        assert content["example"]["type"] == entry.name
        # Another type's envelope, or data of the wrong shape, is not this one.
        other = {**content["example"], "type": "not.this"}
        assert list(validator.iter_errors(other))
        assert not envelope_problems(content["example"])
        data = content["schema"]["properties"]["data"]["anyOf"][0]["$ref"].rsplit("/", 1)[1]
        assert schemas[data]["title"] == data
    # The data types are components the paths share: Message is the one GET /v1/messages
    # answers.
    assert doc["webhooks"]["message.received"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]["properties"]["data"]["anyOf"][0] == {"$ref": "#/components/schemas/Message"}


def test_the_drift_check_sees_drift() -> None:
    (good,) = (e for e in CATALOG if e.name == "message.received")
    envelope = {
        "id": "EV" + "0" * 32,
        "type": "message.received",
        "apiVersion": "2026-11-01",
        "createdAt": "2026-11-21T04:36:12.123Z",
        "data": dict(good.example),
    }
    assert envelope_problems(envelope) == []
    assert envelope_problems({**envelope, "data": None}) == []  # expunged
    missing = {k: v for k, v in good.example.items() if k != "conversationId"}
    (problem,) = envelope_problems({**envelope, "data": missing})
    assert "conversationId" in problem
    (problem,) = envelope_problems({**envelope, "data": {**good.example, "status": "lost"}})
    assert "['status']" in problem
    assert envelope_problems({**envelope, "type": "order.paid_late"}) == [
        "'order.paid_late' is not in the event catalog"
    ]
    assert envelope_problems({**envelope, "createdAt": 5})
    # Bodies that are not envelopes (a test's own request to a receiver) are left alone.
    assert body_problems([b"not json", b'{"id": "x"}', json.dumps(envelope).encode()]) == []


def test_docs_list_every_type_and_point_to_the_endpoint() -> None:
    text = (DOCS / "events.md").read_text()
    assert "GET /v1/event-types" in text
    listed = set(re.findall(r"`([a-z]+(?:\.[a-z_]+)+)`", text))
    assert set(NAMES) <= listed, set(NAMES) - listed


async def test_one_event_of_every_type_reaches_a_receiver_as_the_catalog_describes_it(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    services: Services,
    db: Database,
) -> None:
    """Every type, made by the service the way it makes it (the inbound doors, the carrier,
    the engine's settlements, the webhook's own routes; the application's types published),
    heard by one subscription to them all and validated against the schema `GET
    /v1/event-types` publishes for it."""
    headers = ws.headers

    async def call(method: str, path: str, status: int, body: Any = None) -> Any:
        resp = await client.request(method, path, json=body, headers=headers)
        assert resp.status == status, await resp.text()
        return await resp.json()

    async def hook(path: str, events: list[str]) -> str:
        made = await call(
            "POST", "/v1/webhooks", 201, {"url": receiver.url(path), "events": events}
        )
        return str(made["id"])

    everything = await hook("/all", sorted(EVENT_TYPES))
    receiver.behaviours["/flaky"] = sequence(answer(500), answer(200))
    receiver.behaviours["/failing"] = answer(503)
    await hook("/flaky", ["contact.updated"])
    await hook("/failing", ["contact.deleted"])
    idle = await hook("/idle", ["contact.updated"])
    engine = await make_engine(retry_schedule=(0.01,))

    inbound = {"from": "+15557770000", "to": ws.number, "text": "Is the shop open on Sunday?"}
    await call("POST", "/v1/inbound/messages", 201, inbound)
    for status in CallStatus:
        body = {"from": "+15557770000", "to": ws.number, "status": status.value}
        await call("POST", "/v1/inbound/calls", 201, body)
    for to in ("+15557770001", min(SANDBOX_FAILING_NUMBERS)):
        await call("POST", "/v1/messages", 202, {"from": ws.number, "to": to, "text": "Hello"})
    carrier = SandboxCarrier(db, services.clock, delay=0.0)
    await carrier.advance()  # queued -> sent
    await carrier.advance()  # sent -> delivered | undelivered
    for event_type in (e.name for e in CATALOG if e.data is ApplicationEventData):
        data = {"id": "CT42", "name": "Ada", "tags": ["vip"], "score": 3.5}
        await call("POST", "/v1/events", 202, {"type": event_type, "data": data})
    for enabled in (False, True):
        await call("PATCH", f"/v1/webhooks/{idle}", 200, {"enabled": enabled})
    await call("POST", f"/v1/webhooks/{everything}/test", 202)

    def heard() -> set[str]:
        return {json.loads(r.body)["type"] for r in receiver.at("/all")}

    def all_heard() -> bool:
        engine.poke()
        return heard() >= set(NAMES)

    await wait_for(all_heard, message=f"every type at /all (missing: {set(NAMES) - heard()})")
    assert heard() >= OPERATIONAL_TYPES
    problems = body_problems(r.body for r in receiver.requests)
    assert not problems, problems
