"""What crosses the store's boundary: typed rows (store/rows.py), never asyncpg's records.

Every statement a row type is made from returns that type's columns, in its order and of its
types; a statement and a row that disagree fail loudly, naming both; no store function hands
a record out, and no module above the store (the API above all) imports the driver or its
record type.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

import pytest

from dispatcher.store import (
    attempts,
    conversations,
    deliveries,
    events,
    expunge,
    messages,
    webhooks,
    workspaces,
)
from dispatcher.store.database import Database, StoreError
from dispatcher.store.queries import Statement
from dispatcher.store.rows import (
    NESTED,
    ApiKeyRow,
    AttemptRow,
    CallRow,
    ConversationRow,
    DeliveryRow,
    EventRow,
    LockedWebhookRow,
    MessageRow,
    PhoneNumberRow,
    WebhookRow,
    WorkspaceRow,
    as_row,
    as_rows,
    columns,
)

PACKAGE = Path(__file__).resolve().parents[2] / "dispatcher"
STORE = PACKAGE / "store"

# Each statement whose rows the store hands out, with the row type they are made into.
STATEMENTS: list[tuple[str, Statement, type[NamedTuple]]] = [
    ("webhooks.CREATE", webhooks.CREATE, WebhookRow),
    ("webhooks.WEBHOOK", webhooks.WEBHOOK, WebhookRow),
    ("webhooks.WEBHOOKS_PAGE", webhooks.WEBHOOKS_PAGE, WebhookRow),
    ("webhooks.lock_webhook", webhooks.SQL.lock_webhook, LockedWebhookRow),
    ("deliveries.deliveries_page", deliveries.SQL.deliveries_page, DeliveryRow),
    ("deliveries.delivery", deliveries.SQL.delivery, DeliveryRow),
    ("deliveries.event_delivery", deliveries.SQL.event_delivery, DeliveryRow),
    ("deliveries.event_deliveries_page", deliveries.SQL.event_deliveries_page, DeliveryRow),
    ("attempts.delivery_attempts_page", attempts.SQL.delivery_attempts_page, AttemptRow),
    ("attempts.webhook_attempts_page", attempts.SQL.webhook_attempts_page, AttemptRow),
    ("events.events_page", events.SQL.events_page, EventRow),
    ("events.event", events.SQL.event, EventRow),
    ("expunge.erase_event", expunge.SQL.erase_event, EventRow),
    ("expunge.erase_message_text", expunge.SQL.erase_message_text, MessageRow),
    ("messages.create_outgoing", messages.SQL.create_outgoing, MessageRow),
    ("messages.create_incoming", messages.SQL.create_incoming, MessageRow),
    ("messages.create_call", messages.SQL.create_call, CallRow),
    ("messages.message", messages.SQL.message, MessageRow),
    ("messages.messages_page", messages.SQL.messages_page, MessageRow),
    ("messages.claim_carrier_due", messages.SQL.claim_carrier_due, MessageRow),
    ("messages.move_statuses", messages.SQL.move_statuses, MessageRow),
    ("conversations.conversation", conversations.SQL.conversation, ConversationRow),
    ("conversations.set_status", conversations.SQL.set_status, ConversationRow),
    ("conversations.conversations_page", conversations.SQL.conversations_page, ConversationRow),
    ("workspaces.insert_workspace", workspaces.SQL.insert_workspace, WorkspaceRow),
    ("workspaces.workspace", workspaces.SQL.workspace, WorkspaceRow),
    ("workspaces.workspaces_page", workspaces.SQL.workspaces_page, WorkspaceRow),
    ("workspaces.insert_number", workspaces.SQL.insert_number, PhoneNumberRow),
    ("workspaces.numbers_page", workspaces.SQL.numbers_page, PhoneNumberRow),
    ("workspaces.insert_key", workspaces.SQL.insert_key, ApiKeyRow),
    ("workspaces.keys_page", workspaces.SQL.keys_page, ApiKeyRow),
]

# The Python types the driver returns for each Postgres type (a field may add `| None`).
DRIVER_TYPES: dict[str, set[str]] = {
    "text": {"str"},
    "int4": {"int"},
    "bool": {"bool"},
    "timestamptz": {"datetime"},
    "text[]": {"list[str]"},
    "float8": {"float"},
    "int4[]": {"list[int]"},
    # The codec (store/database.py) decodes any JSON value: the field names the shape.
    "jsonb": {"dict[str, str]", "dict[str, Any]", "list[MessageMedia]"},
}


@pytest.mark.parametrize(("name", "sql", "row_type"), STATEMENTS, ids=[s[0] for s in STATEMENTS])
async def test_each_statement_returns_its_rows_columns_in_order_and_of_its_types(
    db: Database, name: str, sql: Statement, row_type: type[NamedTuple]
) -> None:
    async with db.acquire() as conn:
        attributes = (await conn.prepare(sql.sql)).get_attributes()
    assert tuple(a.name for a in attributes) == columns(row_type), name
    nested = NESTED.get(row_type)
    for attribute in attributes:
        # Declared by the row, or by the row nested in it (store/rows.py `NESTED`).
        owner = row_type if attribute.name in row_type._fields else nested
        assert owner is not None, (name, attribute.name)
        # As written: `from __future__ import annotations` leaves the annotation a string,
        # which NamedTuple wraps in a ForwardRef.
        declared: str = owner.__annotations__[attribute.name].__forward_arg__
        assert declared.removesuffix(" | None") in DRIVER_TYPES[attribute.type.name], (
            name,
            attribute.name,
            declared,
        )


async def test_a_statement_and_a_row_that_disagree_fail_naming_both(db: Database) -> None:
    async with db.acquire() as conn:
        # The right columns in another order: made by position, it would swap `id` and `name`.
        swapped = await conn.fetchrow("SELECT 'Acme' AS name, 'WS1' AS id, now() AS created_at")
        right = await conn.fetch("SELECT 'WS1' AS id, 'Acme' AS name, now() AS created_at")
    assert swapped is not None
    with pytest.raises(StoreError, match=r"WorkspaceRow takes the columns id, name, created_at; "):
        as_row(WorkspaceRow, swapped)
    with pytest.raises(StoreError, match=r"the statement returned name, id, created_at"):
        as_rows(WorkspaceRow, [swapped])
    [made] = as_rows(WorkspaceRow, right)
    assert (made.id, made.name) == ("WS1", "Acme")
    assert as_rows(WorkspaceRow, []) == []


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


DRIVER_NAMES = re.compile(r"\b(Record|asyncpg)\b")


def test_no_store_function_hands_out_a_record() -> None:
    """Outside database.py (the driver's own module: the pool, and `fetch_one` for the store's
    statements), no public function of the store returns anything of asyncpg's."""
    found = []
    for path in sorted(STORE.glob("*.py")):
        if path.name == "database.py":
            continue
        for node in _parse(path).body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            returns = "" if node.returns is None else ast.unparse(node.returns)
            if not node.name.startswith("_") and DRIVER_NAMES.search(returns):
                found.append(f"{path.name}: {node.name} -> {returns}")
    assert found == []


def test_nothing_above_the_store_imports_the_driver_or_its_records() -> None:
    """The API (and the engine, the carrier, the CLI) read typed rows: not one of their modules
    imports asyncpg, or the store's `Record` or `Connection` (lint-imports holds the first
    for whole modules; this holds the names, which it cannot see)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if STORE in path.parents:
            continue
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import):
                found += [f"{where}: {a.name}" for a in node.names if a.name.startswith("asyncpg")]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                if node.module.startswith("asyncpg"):
                    found.append(f"{where}: from {node.module}")
                elif node.module.startswith("dispatcher.store"):
                    names = {a.name for a in node.names} & {"Record", "Connection"}
                    found += [f"{where}: {node.module}.{name}" for name in sorted(names)]
            elif isinstance(node, ast.Attribute) and node.attr in {"Record", "Connection"}:
                found.append(f"{where}: .{node.attr}")
    assert found == []
