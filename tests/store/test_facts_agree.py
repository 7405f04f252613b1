"""Facts written in both Python and SQL agree (issue 24, "Facts checked across languages").

Some facts the database must know itself (a CHECK constraint, the outbox function users call,
the claim's token bucket), and Python knows them too (the API's models, the domain's rules).
Each such fact has its Python home, and this module compares it with where SQL says it:

- every closed set of values (the StrEnums) with the CHECK constraint of each column that holds
  it, read from a live database's catalog, and with the literals SQL compares those columns to
  (schema.sql and store/queries/*.sql);
- the words a give-up writes in a delivery's last error;
- the event-type pattern, the ordering key's rule, the JSON bounds of published data and the
  payload filter's compared-array bound, by asking the database's own functions;
- which secrets sign now (domain/signing.py against queries/webhooks.sql's demo statement);
- the trigger a new delivery gets and the test event's name in dispatcher_add_deliveries, read
  from the live function (wherever its text is kept);
- the bounds of webhook options (CHECK constraints, the API's models and the docs against
  domain/endpoints.py), that each of its options is a column, and the rate bucket's catch-up
  (queries/queue.sql against domain/rate_limits.py).

A new CHECK constraint over a list of values, or a new column compared to literals, fails here
until it is given its Python home in the tables below.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import annotated_types
import asyncpg
import pytest

from dispatcher import metrics
from dispatcher.api import models
from dispatcher.api.events import OrderingKey
from dispatcher.api.registry import document
from dispatcher.domain import endpoints, json_values, payload_filter, rate_limits
from dispatcher.domain.enums import (
    AttemptTrigger,
    ConversationItemKind,
    ConversationStatus,
    DeliveryStatus,
    Direction,
    DisabledReason,
    HeldReason,
    MessageStatus,
    Ordering,
)
from dispatcher.domain.events import EVENT_TYPE_PATTERN, TEST_EVENT
from dispatcher.domain.outcomes import AttemptOutcome, GiveUpReason
from dispatcher.domain.poll import WebhookMode
from dispatcher.domain.portal import Capabilities
from dispatcher.domain.signing import signing_secrets
from dispatcher.domain.text import is_control
from dispatcher.store import queue, webhooks
from dispatcher.store.database import Database
from dispatcher.store.webhooks import DELETED_ERROR, DISABLED_ERROR
from tests.conftest import Workspace

SCHEMA = Path(__file__).parents[2] / "schema.sql"


def _sql_text() -> dict[str, str]:
    """schema.sql, every store query file and the functions, by name."""
    texts = {"schema.sql": SCHEMA.read_text()}
    folder = resources.files("dispatcher.store.queries")
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            texts[entry.name] = entry.read_text()
    texts["functions.sql"] = (
        resources.files("dispatcher.store").joinpath("functions.sql").read_text()
    )
    return texts


SQL = _sql_text()


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    try:
        yield connection
    finally:
        await connection.close()


# --- Closed sets of values -------------------------------------------------------------------

# (table, column) -> the enumeration its CHECK constraint lists, value for value.
CHECKED: dict[tuple[str, str], type[StrEnum]] = {
    ("conversations", "status"): ConversationStatus,
    ("messages", "direction"): Direction,
    ("messages", "status"): MessageStatus,
    ("calls", "direction"): Direction,
    ("webhooks", "disabled_reason"): DisabledReason,
    ("webhooks", "ordering"): Ordering,
    ("deliveries", "status"): DeliveryStatus,
    ("portal_sessions", "capabilities"): Capabilities,
    ("webhooks", "mode"): WebhookMode,
}

# (table, column) -> the member its DEFAULT is.
DEFAULTS: dict[tuple[str, str], StrEnum] = {
    ("conversations", "status"): ConversationStatus.OPEN,
    ("webhooks", "ordering"): Ordering.NONE,
    ("deliveries", "status"): DeliveryStatus.PENDING,
    ("delivery_queue", "trigger"): AttemptTrigger.SCHEDULE,
    ("webhooks", "mode"): WebhookMode.PUSH,
}

# A column SQL compares to (or sets to) a literal -> the values it may hold. `status` is the
# name of several tables' columns (and of the record's CTE columns): any of their statuses.
COMPARED: dict[str, frozenset[str]] = {
    "status": frozenset(MessageStatus) | frozenset(DeliveryStatus) | frozenset(ConversationStatus),
    "direction": frozenset(Direction),
    "ordering": frozenset(Ordering),
    "trigger": frozenset(AttemptTrigger),
    "outcome": frozenset(AttemptOutcome),
    "disabled_reason": frozenset(DisabledReason),
    "mode": frozenset(WebhookMode),
    "last_item_kind": frozenset(ConversationItemKind),
    # The words a give-up writes as a delivery's last error (the record suffixes them too).
    "last_error": frozenset({GiveUpReason.EXPUNGED, DISABLED_ERROR, DELETED_ERROR}),
}

_CHECK_IN = re.compile(r"^CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)$")
_TEXT_LITERAL = re.compile(r"'((?:[^']|'')*)'::text")


async def test_every_check_list_is_its_enumeration(conn: asyncpg.Connection) -> None:
    """Each CHECK constraint that lists a column's values lists exactly its StrEnum's, and no
    such constraint lacks a row in CHECKED."""
    rows = await conn.fetch(
        """
        SELECT c.relname, pg_get_constraintdef(con.oid) AS definition
        FROM pg_constraint con
        JOIN pg_class c ON c.oid = con.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND con.contype = 'c' AND con.conparentid = 0
          AND c.relispartition = false
        """
    )
    found: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        match = _CHECK_IN.match(row["definition"])
        if match:
            found[(row["relname"], match[1])] = _TEXT_LITERAL.findall(match[2])
    assert set(found) == set(CHECKED), "a CHECK over a list of values has no StrEnum in CHECKED"
    for place, enum in CHECKED.items():
        assert found[place] == [member.value for member in enum], (place, enum.__name__)


async def test_every_enum_default_is_a_member(conn: asyncpg.Connection) -> None:
    rows = await conn.fetch(
        """
        SELECT table_name, column_name, column_default FROM information_schema.columns
        WHERE table_schema = 'public' AND (table_name, column_name) IN
            (SELECT * FROM unnest($1::text[], $2::text[]))
        """,
        [table for table, _ in DEFAULTS],
        [column for _, column in DEFAULTS],
    )
    defaults = {(row["table_name"], row["column_name"]): row["column_default"] for row in rows}
    assert defaults == {place: f"'{member}'::text" for place, member in DEFAULTS.items()}


# `col = 'x'`, `col <> 'x'` (with an optional table alias), `col IN ('x', 'y')`.
_COMPARISON = re.compile(
    r"\b(?:\w+\.)?(\w+)\s*(?:=|<>|!=)\s*'((?:[^']|'')*)'(?!::(?:jsonb?|interval|regclass))"
)
_IN_LIST = re.compile(r"\b(?:\w+\.)?(\w+)\s+(?:NOT\s+)?IN\s*\(((?:\s*'[^']*'\s*,?)+)\)")


def _without_comments(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def _compared_literals() -> list[tuple[str, str, str]]:
    """(file, column, literal) for every comparison of a COMPARED column to a literal."""
    found = []
    for name, text in SQL.items():
        code = _without_comments(text)
        for match in _COMPARISON.finditer(code):
            found.append((name, match[1], match[2]))
        for match in _IN_LIST.finditer(code):
            found += [(name, match[1], value) for value in re.findall(r"'([^']*)'", match[2])]
    return [(name, column, value) for name, column, value in found if column in COMPARED]


def test_every_literal_compared_to_an_enum_column_is_a_member() -> None:
    """`status = 'failed'`, `ordering = 'fifo'`, `trigger = 'schedule'`, `last_error =
    'expunged'`... in schema.sql and the store's queries: each literal is one of its column's
    values in Python."""
    literals = _compared_literals()
    # The scan finds what it is meant to (about 40 literals today): an empty scan passes nothing.
    assert len(literals) >= 30
    assert {column for _, column, _ in literals} >= {"status", "ordering", "trigger", "outcome"}
    strays = [item for item in literals if item[2] not in COMPARED[item[1]]]
    assert strays == []


# `INSERT INTO t [AS x] (columns) VALUES (...)` or `... (columns) SELECT ...`: what follows is
# the row, value by value in the columns' order.
_INSERT = re.compile(r"INSERT INTO (\w+)(?: AS \w+)?\s*\(([^)]*)\)\s*(VALUES\s*\(|SELECT\s)")
_LITERAL = re.compile(r"^'((?:[^']|'')*)'(?:::text)?$")
_ROW_ENDS = re.compile(r"\s(?:FROM|WHERE|ON CONFLICT|RETURNING|ORDER BY)\s|;")


def _row_values(code: str, start: int, in_brackets: bool) -> list[str]:
    """The row's values from `start`, split at the commas outside brackets and strings: up to
    the closing bracket of VALUES, or a SELECT's FROM, WHERE, ON CONFLICT or end."""
    values, depth, quoted, current = [], 0, False, ""
    i = start
    while i < len(code):
        char = code[i]
        if quoted:
            quoted = char != "'"
        elif char == "'":
            quoted = True
        elif char == "(":
            depth += 1
        elif char == ")":
            if depth == 0 and in_brackets:
                break
            depth -= 1
        elif depth == 0 and not in_brackets and _ROW_ENDS.match(code, i):
            break
        elif depth == 0 and char == ",":
            values.append(current.strip())
            current = ""
            i += 1
            continue
        current += char
        i += 1
    return [*values, current.strip()]


def _inserted_literals() -> list[tuple[str, str, str, str]]:
    """(file, table, column, literal) for every literal written into a column by an INSERT."""
    found = []
    for name, text in SQL.items():
        code = _without_comments(text)
        for match in _INSERT.finditer(code):
            columns = [column.strip() for column in match[2].split(",")]
            values = _row_values(code, match.end(), match[3].startswith("VALUES"))
            for column, value in zip(columns, values, strict=False):
                if literal := _LITERAL.match(value):
                    found.append((name, match[1], column, literal[1]))
    return found


def test_every_literal_inserted_into_an_enum_column_is_a_member() -> None:
    """`INSERT INTO messages (..., direction, ..., status) VALUES (..., 'outgoing', ...,
    'queued')`, in schema.sql, the queries and the functions: each literal written into a column
    of COMPARED is one of its values in Python."""
    literals = _inserted_literals()
    enum_columns = [item for item in literals if item[2] in COMPARED]
    # The scan finds what it is meant to: the messages' and the conversations' literals at least.
    assert {("messages", "direction", "outgoing"), ("messages", "status", "received"),
            ("conversations", "status", "open")} <= {item[1:] for item in enum_columns}  # fmt: skip
    strays = [item for item in enum_columns if item[3] not in COMPARED[item[2]]]
    assert strays == []


def test_give_up_words_are_the_stop_reasons() -> None:
    """The claim and the record give a row up with the same words (queries/queue.sql, their
    `CASE WHEN q.expunged ...`); a deleted or disabled webhook's pending deliveries get
    store/webhooks.py's; an expunge's the reason's own."""
    reasons = re.findall(
        r"CASE WHEN q\.expunged .*? END", _without_comments(SQL["queue.sql"]), re.S
    )
    assert len(reasons) == 2  # the claim's and the record's
    for reason in reasons:
        words = re.findall(r"THEN '([^']*)'", reason)
        assert words == [GiveUpReason.EXPUNGED, DELETED_ERROR, DISABLED_ERROR]


# --- Rules the database applies itself --------------------------------------------------------


async def _function(conn: asyncpg.Connection, name: str, arguments: int) -> str:
    source: str = await conn.fetchval(
        "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = $1 AND p.pronargs = $2",
        name,
        arguments,
    )
    return source


async def test_event_type_pattern(conn: asyncpg.Connection) -> None:
    """dispatcher_publish_event refuses what the API refuses: the same pattern, anchored (the
    API matches whole strings), and the test event."""
    source = await _function(conn, "dispatcher_publish_event", 5)
    match = re.search(r"p_type = '([^']*)' OR p_type !~ '([^']*)'", source)
    assert match, "dispatcher_publish_event no longer checks the event type as expected"
    assert match[1] == TEST_EVENT
    assert match[2] == f"^{EVENT_TYPE_PATTERN}$"


def _bounds(annotated: Any) -> tuple[int, int]:
    """The (min, max) length or value a pydantic Annotated type declares."""
    low = high = None
    for info in typing.get_args(annotated)[1:]:
        for bound in getattr(info, "metadata", ()):
            if isinstance(bound, annotated_types.MinLen):
                low = bound.min_length
            elif isinstance(bound, annotated_types.MaxLen):
                high = bound.max_length
            elif isinstance(bound, annotated_types.Ge):
                low = int(bound.ge)  # type: ignore[call-overload]
            elif isinstance(bound, annotated_types.Le):
                high = int(bound.le)  # type: ignore[call-overload]
    assert low is not None and high is not None, annotated
    return low, high


def _max_length(annotated: Any) -> int | None:
    """The max length a pydantic Annotated type declares (it may declare no minimum)."""
    for info in typing.get_args(annotated)[1:]:
        for bound in getattr(info, "metadata", ()):
            if isinstance(bound, annotated_types.MaxLen):
                return bound.max_length
    return None


async def test_ordering_key_rule(conn: asyncpg.Connection, ws: Workspace) -> None:
    """The outbox function takes the ordering keys the API takes: the same lengths, and no
    character the API calls a control (every code point is asked)."""
    shortest, longest = _bounds(OrderingKey)

    async def accepted(key: str) -> bool:
        """Whether the outbox takes `key`; nothing is kept either way."""
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.fetchval(
                "SELECT dispatcher_publish_event($1, 'contact.updated', $2, NULL, $3)",
                ws.id,
                '{"id": "CT1"}',
                key,
            )
        except asyncpg.InvalidParameterValueError as error:
            assert "ordering key" in str(error)
            return False
        finally:
            await transaction.rollback()
        return True

    assert await accepted("k" * longest)
    assert not await accepted("k" * (longest + 1))
    assert await accepted("k" * shortest)
    assert not await accepted("k" * (shortest - 1))

    source = await _function(conn, "dispatcher_publish_event", 5)
    match = re.search(r"p_ordering_key ~ '([^']*)'", source)
    assert match, "dispatcher_publish_event no longer checks the ordering key's characters"
    # Every code point Postgres text can hold (no NUL, no surrogates) that the class matches.
    sql_controls = await conn.fetchval(
        """
        SELECT array_agg(i ORDER BY i) FROM generate_series(1, 1114111) i
        WHERE i NOT BETWEEN 55296 AND 57343 AND chr(i) ~ $1
        """,
        match[1],
    )
    python_controls = [i for i in range(1, 0x110000) if is_control(chr(i))]
    assert sql_controls == python_controls


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


async def test_json_bounds(conn: asyncpg.Connection) -> None:
    """dispatcher_json_problem (the outbox's check of `data`) refuses past the domain's depth
    and number bounds, in the domain's words, and takes what is at them."""
    depth = json_values.MAX_JSON_DEPTH
    cases = {
        _nested(depth): None,
        _nested(depth + 1): json_values.DEPTH_PROBLEM,
        f"[{json_values.MIN_NUMBER}, {json_values.MAX_NUMBER}]": None,
        f"[{json_values.MIN_NUMBER - 1}]": json_values.NUMBER_PROBLEM,
        f"[{json_values.MAX_NUMBER + 1}]": json_values.NUMBER_PROBLEM,
    }
    for value, problem in cases.items():
        answer = await conn.fetchval("SELECT dispatcher_json_problem($1::jsonb)", value)
        assert answer == problem, value[:40]
        assert _python_problem(json.loads(value)) == problem, value[:40]


def _python_problem(value: list[Any]) -> str | None:
    """What Python says of `value`: the depth (json_problem), then its numbers (in_range, as
    the API's body parser asks)."""
    numbers = [item for item in value if isinstance(item, int)]
    if json_values.json_problem(value):
        return json_values.json_problem(value)
    return None if all(map(json_values.in_range, numbers)) else json_values.NUMBER_PROBLEM


async def test_compared_array_bound(conn: asyncpg.Connection) -> None:
    """dispatcher_filter_passes looks into a data array of at most the domain's
    MAX_COMPARED_ARRAY_ELEMENTS elements, and no longer one."""
    bound = payload_filter.MAX_COMPARED_ARRAY_ELEMENTS

    async def passes(elements: int) -> bool:
        data = '{"tags": [' + ", ".join(['"a"'] * elements) + "]}"
        passed: bool = await conn.fetchval(
            "SELECT dispatcher_filter_passes($1::jsonb, $2::jsonb,"
            " dispatcher_filter_arrays($2::jsonb), NULL)",
            data,
            '{"tags": ["a"]}',
        )
        return passed

    assert await passes(bound)
    assert not await passes(bound + 1)


async def test_webhook_option_bounds(conn: asyncpg.Connection) -> None:
    """The CHECK constraints on webhooks' options bound them as the API's models do."""
    rows = await conn.fetch(
        """
        SELECT pg_get_constraintdef(con.oid) AS definition FROM pg_constraint con
        WHERE con.conrelid = 'webhooks'::regclass AND con.contype = 'c'
        """
    )
    between = {}
    for row in rows:
        match = re.match(r"CHECK \(\(\((\w+) >= (\d+)\) AND \(\1 <= (\d+)\)\)\)", row["definition"])
        if match:
            between[match[1]] = (int(match[2]), int(match[3]))
    assert between == {
        "max_concurrency": _bounds(models.Concurrency),
        "rate_limit": _bounds(models.RateLimit),
    }
    # ... and as the domain's one description of an endpoint does (domain/endpoints.py).
    assert between == {
        "max_concurrency": (endpoints.MIN_CONCURRENCY, endpoints.MAX_CONCURRENCY),
        "rate_limit": (endpoints.MIN_RATE_LIMIT, endpoints.MAX_RATE_LIMIT),
    }


def test_webhook_option_bounds_of_the_models_are_the_domains() -> None:
    """The API's models bound each endpoint option by the domain's constants."""
    assert _bounds(models.Concurrency) == (endpoints.MIN_CONCURRENCY, endpoints.MAX_CONCURRENCY)
    assert _bounds(models.RateLimit) == (endpoints.MIN_RATE_LIMIT, endpoints.MAX_RATE_LIMIT)
    assert _bounds(models.WebhookUrl) == (1, endpoints.MAX_URL_LENGTH)
    assert _bounds(models.EventTypes) == (1, endpoints.MAX_EVENT_TYPES)
    assert _max_length(models.NumberIds) == endpoints.MAX_NUMBER_IDS
    assert _max_length(models.Name) == endpoints.MAX_NAME_LENGTH


def test_the_docs_state_the_endpoint_bounds() -> None:
    """docs/webhooks.md and docs/api.md repeat the domain's bounds of an endpoint's options."""
    docs = Path(__file__).parents[2] / "docs"
    webhooks_md, api_md = (docs / "webhooks.md").read_text(), (docs / "api.md").read_text()
    concurrency = f"{endpoints.MIN_CONCURRENCY}..{endpoints.MAX_CONCURRENCY}"
    rate = f"{endpoints.MIN_RATE_LIMIT}..{endpoints.MAX_RATE_LIMIT}"
    assert re.search(rf"\| `maxConcurrency` \|[^\n]*\b{re.escape(concurrency)} \|", webhooks_md)
    assert re.search(rf"\| `rateLimit` \|[^\n]*an integer {re.escape(rate)},", webhooks_md)
    counts = f"| {endpoints.MAX_EVENT_TYPES} event types, {endpoints.MAX_NUMBER_IDS:,} numbers |"
    assert counts in api_md


async def test_webhook_columns_are_the_endpoint_options(conn: asyncpg.Connection) -> None:
    """Every option of the domain's endpoint is a column of `webhooks` of the same name (the
    store's one column list is made from the option names)."""
    columns = await conn.fetchval(
        "SELECT array_agg(column_name::text) FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name = 'webhooks'"
    )
    assert set(endpoints.OPTIONS) <= set(columns)


def test_rate_bucket_catch_up() -> None:
    """The claim's token bucket (queries/queue.sql) catches up by the domain's CATCH_UP_SECONDS:
    its capacity 1 + R x catch-up, and how far back a bucket's ready time may lag."""
    claim = _without_comments(SQL["queue.sql"])
    capacities = re.findall(r"least\(1 \+ b\.rate_limit \* ([\d.]+),", claim)
    lags = re.findall(r"b\.at - interval '([\d.]+) seconds'", claim)
    assert capacities and lags, "the claim's bucket is no longer written as this test reads it"
    assert {float(value) for value in capacities + lags} == {rate_limits.CATCH_UP_SECONDS}


async def test_which_secrets_sign_now(conn: asyncpg.Connection, db: Database) -> None:
    """The demo receiver's statement (queries/webhooks.sql `demo_secrets`) picks the secrets
    that sign now as the engine's claim does (domain/signing.py `signing_secrets`): around the
    end of the previous secret's grace, to the microsecond."""
    now = datetime(2026, 11, 1, 12, tzinfo=UTC)
    url = "http://127.0.0.1:9/demo"
    await conn.execute("INSERT INTO workspaces (id, name, demo) VALUES ('WSfacts', 'f', true)")
    cases: dict[str, tuple[str | None, datetime | None]] = {
        "WHa": ("whsec_old_a", now - timedelta(microseconds=1)),
        "WHb": ("whsec_old_b", now),
        "WHc": ("whsec_old_c", now + timedelta(microseconds=1)),
        "WHd": ("whsec_old_d", None),
        "WHe": (None, now + timedelta(hours=1)),
    }
    for webhook_id, (previous, expires) in cases.items():
        await conn.execute(
            """
            INSERT INTO webhooks (id, workspace_id, url, events, secret, previous_secret,
                                  previous_secret_expires_at)
            VALUES ($1, 'WSfacts', $2, '{contact.updated}', $3, $4, $5)
            """,
            webhook_id,
            url,
            f"whsec_{webhook_id}",
            previous,
            expires,
        )
    in_sql = dict(await webhooks.demo_secrets(db, url, now))
    in_python = {
        webhook_id: signing_secrets(f"whsec_{webhook_id}", previous, expires, now)
        for webhook_id, (previous, expires) in cases.items()
    }
    assert in_sql == in_python
    assert in_python["WHc"] == ["whsec_WHc", "whsec_old_c"]  # the grace still runs
    assert in_python["WHb"] == ["whsec_WHb"]  # it ends at its instant


async def test_a_new_deliverys_trigger_and_lane(conn: asyncpg.Connection) -> None:
    """dispatcher_add_deliveries (every delivery's birth, read from the live database so that
    it holds wherever the function's text lives) names the test event as the domain does, and
    gives a new delivery the trigger its enumeration has for it: `test` for the test event,
    `schedule` otherwise; the test event never takes a FIFO lane."""
    sources = [
        _without_comments(row["source"])
        for row in await conn.fetch(
            "SELECT pg_get_functiondef(oid) AS source FROM pg_proc"
            " WHERE proname = 'dispatcher_add_deliveries'"
        )
    ]
    assert sources
    trigger = re.compile(r"CASE WHEN p_type = '([^']*)' THEN '([^']*)' ELSE '([^']*)' END")
    picked = [match.groups() for code in sources for match in trigger.finditer(code)]
    assert picked, "dispatcher_add_deliveries no longer picks the trigger as this test reads it"
    assert set(picked) == {(TEST_EVENT, AttemptTrigger.TEST, AttemptTrigger.SCHEDULE)}
    event_types = [
        value for code in sources for value in re.findall(r"p_type\s*(?:=|<>)\s*'([^']*)'", code)
    ]
    assert len(event_types) >= 3  # the is-test flag, the trigger, the lane
    assert set(event_types) == {TEST_EVENT}


async def test_endpoint_policy_bounds(conn: asyncpg.Connection, ws: Workspace) -> None:
    """The CHECK constraints on `timeout_seconds` and `retry_schedule` take exactly what the
    domain's bounds take (domain/endpoints.py), and the API's document states those bounds."""
    webhook_id = "WHpolicy"
    await conn.execute(
        "INSERT INTO webhooks (id, workspace_id, url, events, secret) "
        "VALUES ($1, $2, 'https://example.com/h', '{contact.updated}', 'whsec_x')",
        webhook_id,
        ws.id,
    )

    async def stored(column: str, value: Any) -> bool:
        """Whether the column takes `value`; nothing is kept either way."""
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(
                f"UPDATE webhooks SET {column} = $2 WHERE id = $1", webhook_id, value
            )
        except asyncpg.CheckViolationError:
            return False
        finally:
            await transaction.rollback()
        return True

    low, high = endpoints.MIN_TIMEOUT_SECONDS, endpoints.MAX_TIMEOUT_SECONDS
    assert await stored("timeout_seconds", low) and await stored("timeout_seconds", high)
    assert not await stored("timeout_seconds", low - 0.001)
    assert not await stored("timeout_seconds", high + 0.001)
    fewest, most = endpoints.MIN_RETRY_DELAYS, endpoints.MAX_RETRY_DELAYS
    shortest, longest = endpoints.MIN_RETRY_DELAY, endpoints.MAX_RETRY_DELAY
    assert await stored("retry_schedule", [shortest] * fewest)
    assert await stored("retry_schedule", [longest] * most)
    assert await stored("retry_schedule", None)
    for refused in (
        [shortest] * (fewest - 1),
        [shortest] * (most + 1),
        [shortest - 1],
        [longest + 1],
        [shortest, None],
    ):
        assert not await stored("retry_schedule", refused), refused

    body = document()["components"]["schemas"]["CreateWebhook"]["properties"]
    (timeout, _null) = body["timeoutSeconds"]["anyOf"]
    assert (timeout["minimum"], timeout["maximum"]) == (low, high)
    (schedule, _null) = body["retrySchedule"]["anyOf"]
    assert (schedule["minItems"], schedule["maxItems"]) == (fewest, most)
    assert (schedule["items"]["minimum"], schedule["items"]["maximum"]) == (shortest, longest)


def test_the_waiting_reports_reasons_are_held_reasons() -> None:
    """The engines' waiting report labels its rows in SQL (queries/queue.sql `held_summary`:
    `THEN 'rate_limit'`, `SELECT 'fifo'`, ...); each label is a HeldReason, and every
    HeldReason is reported (the metric declares its series from the enum)."""
    labels = set(re.findall(r"(?:THEN|SELECT)\s+'(\w+)'", queue.SQL.held_summary.sql))
    assert labels == {str(reason) for reason in HeldReason}
    assert tuple(str(reason) for reason in HeldReason) == metrics.HELD_REASONS
