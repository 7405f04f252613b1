"""A client generated from the OpenAPI document by openapi-python-client lists, pages and
patches every resource against a running `serve`.

The generated code is not committed: it is made here, from the document the app serves, into
a temporary directory, and must come out whole (the generator drops any schema or endpoint it
cannot read, with a warning: nine schemas titled `Page` once left one list readable).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dispatcher.api.registry import document
from tests.processes import free_port, read_until, start, stop, until_ready

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
ADMIN_TOKEN = "generated-client-admin-token-0123456789"
PACKAGE = "dispatcher_generated_client"


def _generate(tmp_path: Path) -> Any:
    """The generated package, imported; fails on any warning of the generator."""
    if not GENERATOR.exists():
        pytest.skip("openapi-python-client is not installed (the dev extra)")
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(document()))
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    out = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(spec), "--meta", "none",
         "--output-path", str(tmp_path / PACKAGE)],
        capture_output=True, text=True, timeout=300,
        env={"PATH": f"{Path(ruff).parent}:/usr/bin:/bin"},
    )  # fmt: skip
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert "Warning" not in said and "Unable" not in said, said
    sys.path.insert(0, str(tmp_path))
    return importlib.import_module(PACKAGE)


def _call(package: str, module: str) -> Callable[..., Any]:
    return importlib.import_module(f"{PACKAGE}.api.{package}.{module}").sync_detailed  # type: ignore[no-any-return]


def _model(name: str, cls: str) -> Any:
    return getattr(importlib.import_module(f"{PACKAGE}.models.{name}"), cls)


def _every_page(list_call: Callable[..., Any], client: Any, **kw: Any) -> list[str]:
    """The ids of every item, two a page, through each page's `nextCursor`."""
    ids: list[str] = []
    cursor: Any = importlib.import_module(f"{PACKAGE}.types").UNSET
    pages = 0
    while True:
        resp = list_call(client=client, limit=2, cursor=cursor, **kw)
        assert resp.status_code == 200, resp.content
        page = resp.parsed
        ids += [item.id for item in page.data]
        pages += 1
        if not page.next_cursor:
            assert len(set(ids)) == len(ids), ids  # no item twice across pages
            return ids
        cursor = page.next_cursor
        assert pages < 50


def _exercise(generated: Any, base: str, key: str) -> None:
    # The clients' connections are closed when done (an unclosed socket is a test's error).
    with (
        generated.AuthenticatedClient(base_url=base, token=key) as client,
        generated.AuthenticatedClient(base_url=base, token=ADMIN_TOKEN) as admin,
    ):
        _exercise_with(generated, base, client, admin)


def _exercise_with(generated: Any, base: str, client: Any, admin: Any) -> None:
    types = importlib.import_module(f"{PACKAGE}.types")

    # Webhooks: create three, page through them, PATCH one field only.
    CreateWebhook = _model("create_webhook", "CreateWebhook")
    Events = _model("create_webhook_events_item", "CreateWebhookEventsItem")
    hooks = []
    for n in range(3):
        resp = _call("default", "create_webhook")(
            client=client,
            body=CreateWebhook(
                url=f"https://example.com/{n}", events=[Events.MESSAGE_DELIVERED], name=f"h{n}"
            ),
        )
        assert resp.status_code == 201, resp.content
        hooks.append(resp.parsed.id)
    # (the demo workspace has webhooks of its own)
    assert set(hooks) <= set(_every_page(_call("default", "list_webhooks"), client))

    UpdateWebhook = _model("update_webhook", "UpdateWebhook")
    partial = UpdateWebhook(name="renamed")
    assert partial.to_dict() == {"name": "renamed"}  # nothing else is sent, not even null
    resp = _call("default", "update_webhook")(client=client, webhook_id=hooks[0], body=partial)
    assert resp.status_code == 200, resp.content
    assert (resp.parsed.name, resp.parsed.url) == ("renamed", "https://example.com/0")
    cleared = UpdateWebhook(max_concurrency=None, rate_limit=None, enabled=False)
    assert cleared.to_dict() == {"maxConcurrency": None, "rateLimit": None, "enabled": False}
    resp = _call("default", "update_webhook")(client=client, webhook_id=hooks[0], body=cleared)
    assert resp.status_code == 200, resp.content
    assert resp.parsed.disabled_at is not None

    # Pull delivery: a poll webhook (no url), its consumer starting now (docs/webhooks.md).
    made = _call("default", "create_webhook")(
        client=client,
        body=CreateWebhook.from_dict({"mode": "poll", "events": ["message.delivered"]}),
    )
    assert made.status_code == 201, made.content
    assert made.parsed.url is None
    poll_webhook = _call("default", "poll_webhook")
    start = poll_webhook(client=client, webhook_id=made.parsed.id)
    assert start.status_code == 200, start.content
    assert (start.parsed.data, start.parsed.done) == ([], True)

    # Messages and their conversations: three contacts, each a conversation.
    SendMessage = _model("send_message", "SendMessage")
    for n in range(3):
        resp = _call("default", "send_message")(
            client=client, body=SendMessage(from_="+15555550100", to=f"+1555555013{n}", text="hi")
        )
        assert resp.status_code in (200, 201, 202), resp.content
    assert len(_every_page(_call("default", "list_messages"), client)) >= 3
    conversations = _every_page(_call("default", "list_conversations"), client)
    assert len(conversations) >= 3
    Status = _model("set_conversation_status", "SetConversationStatus")
    Folder = _model("conversation_status", "ConversationStatus")
    resp = _call("default", "set_conversation_status")(
        client=client, conversation_id=conversations[0], body=Status(status=Folder.DONE)
    )
    assert resp.status_code == 200, resp.content

    # Events (published ones too), their deliveries to the live webhooks, attempts.
    PublishEvent = _model("publish_event", "PublishEvent")
    EventType = _model("publish_event_type", "PublishEventType")
    Data = _model("publish_event_data", "PublishEventData")
    for n in range(3):
        resp = _call("default", "publish_event")(
            client=client,
            body=PublishEvent(
                type_=EventType.MESSAGE_DELIVERED, data=Data.from_dict({"id": str(n)})
            ),
        )
        assert resp.status_code in (200, 201, 202), resp.content
    events = _every_page(_call("default", "list_events"), client)
    assert len(events) >= 3
    polled: list[str] = []
    iterator = start.parsed.iterator
    for _ in range(10):  # pages of 2, until done
        page = poll_webhook(client=client, webhook_id=made.parsed.id, iterator=iterator, limit=2)
        assert page.status_code == 200, page.content
        polled += [event.id for event in page.parsed.data]
        iterator = page.parsed.iterator
        if page.parsed.done:
            break
    assert len(polled) >= 3 and set(polled) <= set(events)  # its type, oldest first
    deliveries = _every_page(_call("default", "list_deliveries"), client, webhook_id=hooks[1])
    assert len(deliveries) >= 3
    _every_page(_call("default", "list_event_deliveries"), client, event_id=events[0])
    _every_page(_call("default", "list_webhook_attempts"), client, webhook_id=hooks[1])
    _every_page(
        _call("default", "list_delivery_attempts"),
        client,
        webhook_id=hooks[1],
        delivery_id=deliveries[0],
    )

    # The admin API: workspaces, their keys and numbers.
    CreateWorkspace = _model("create_workspace", "CreateWorkspace")
    for n in range(3):
        resp = _call("admin", "create_workspace")(client=admin, body=CreateWorkspace(name=f"w{n}"))
        assert resp.status_code == 201, resp.content
    workspaces = _every_page(_call("admin", "list_workspaces"), admin)
    assert len(workspaces) >= 3
    CreateKey = _model("create_key", "CreateKey")
    Scope = _model("scope", "Scope")
    AddNumber = _model("add_number", "AddNumber")
    for n in range(3):
        resp = _call("admin", "create_workspace_key")(
            client=admin, workspace_id=workspaces[0], body=CreateKey(scopes=[Scope.WEBHOOKSREAD])
        )
        assert resp.status_code == 201, resp.content
        resp = _call("admin", "add_workspace_number")(
            client=admin, workspace_id=workspaces[0], body=AddNumber(number=f"+1555555099{n}")
        )
        assert resp.status_code == 201, resp.content
    keys = _every_page(_call("admin", "list_workspace_keys"), admin, workspace_id=workspaces[0])
    numbers = _every_page(
        _call("admin", "list_workspace_numbers"), admin, workspace_id=workspaces[0]
    )
    assert (len(keys), len(numbers)) == (3, 3)
    assert types.UNSET is not None

    # Portal sessions: made by a key and by the admin, exchanged once, deleted.
    CreatePortal = _model("create_portal_session", "CreatePortalSession")
    Capabilities = _model("create_portal_session_capabilities", "CreatePortalSessionCapabilities")
    Exchange = _model("exchange_portal_secret", "ExchangePortalSecret")
    resp = _call("default", "create_portal_session")(
        client=client,
        body=CreatePortal(capabilities=Capabilities.READ, ttl_seconds=60),
    )
    assert resp.status_code == 201, resp.content
    session = resp.parsed
    assert session.id.startswith("PS") and "#portal=" in session.url
    secret = session.url.split("#portal=")[1]
    exchange = _call("default", "exchange_portal_secret")
    with generated.Client(base_url=base) as public:
        resp = exchange(client=public, body=Exchange(secret=secret))
        assert resp.status_code == 200, resp.content
        assert resp.parsed.session_id == session.id and resp.parsed.token.startswith("dps_")
        resp = exchange(client=public, body=Exchange(secret=secret))
        assert resp.status_code == 401, resp.content
    resp = _call("default", "delete_portal_session")(client=client, portal_session_id=session.id)
    assert resp.status_code == 204, resp.content
    resp = _call("admin", "create_workspace_portal_session")(
        client=admin,
        workspace_id=workspaces[0],
        body=CreatePortal(
            capabilities=Capabilities.MANAGE, parent_origin="https://app.example.com"
        ),
    )
    assert resp.status_code == 201, resp.content
    resp = _call("admin", "delete_workspace_portal_session")(
        client=admin, workspace_id=workspaces[0], portal_session_id=resp.parsed.id
    )
    assert resp.status_code == 204, resp.content


async def test_generated_client_lists_pages_and_patches_every_resource(
    database_url: str, tmp_path: Path
) -> None:
    generated = await asyncio.to_thread(_generate, tmp_path)
    port = free_port()
    proc = await start(
        database_url, "serve", "--port", str(port),
        DISPATCHER_ENGINE="off", DISPATCHER_ADMIN_TOKEN=ADMIN_TOKEN,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            await until_ready(http, base)
        await asyncio.to_thread(_exercise, generated, base, key)
    finally:
        code, err = await stop(proc)
    assert code == 0, err
