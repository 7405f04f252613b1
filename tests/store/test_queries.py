"""The store's named statements (dispatcher/store/queries/): a file that does not parse, or that
disagrees with the class binding it, fails at import, never at a call; every statement is
valid SQL against the schema; the files ship in the wheel."""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import pytest

import dispatcher.store
from dispatcher.domain.health import BUCKETS, OUTCOMES
from dispatcher.store import queries, queue, stats, webhooks
from dispatcher.store.database import Database
from dispatcher.store.queries import Queries, QueryFileError, parse

ROOT = Path(__file__).resolve().parents[2]


def test_a_file_parses_into_named_described_statements() -> None:
    text = """-- What the file is about (no statement of its own).

-- name: first
-- What it does,
-- on two lines.
SELECT 1
-- name: second
-- Another.
SELECT @a -- a comment in the statement stays
WHERE true
"""
    found = parse(text)
    assert list(found) == ["first", "second"]
    assert found["first"].description == "What it does, on two lines."
    assert found["first"].sql == "SELECT 1"
    assert found["second"].sql == "SELECT $1 -- a comment in the statement stays\nWHERE true"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-- name: x\nSELECT 1\n", "no description"),
        ("-- name: x\n-- Says what.\n", "no statement"),
        ("-- name: x\n-- A.\nSELECT 1\n-- name: x\n-- B.\nSELECT 2\n", "named twice"),
        ("-- name: Bad-Name\n-- A.\nSELECT 1\n", "not a statement name"),
        ("-- name:\n-- A.\nSELECT 1\n", "not a statement name"),
        ("-- name: x\n-- A.\nSELECT $1\n", "numbers its parameters"),
    ],
)
def test_a_file_that_cannot_be_trusted_is_refused(text: str, problem: str) -> None:
    with pytest.raises(QueryFileError, match=problem):
        parse(text, "bad.sql")


def test_a_class_that_disagrees_with_its_file_fails_when_defined() -> None:
    """A statement declared but not in the file, or in the file but not declared: the class
    statement itself raises (at import), naming both."""
    with pytest.raises(QueryFileError, match=r"declared but not in the file: no_such_query"):

        class Misspelt(Queries, file="events.sql"):
            append_event: str
            append_events: str
            lock_idempotency_key: str
            lock_idempotency_keys: str
            find_idempotent_event: str
            find_idempotent_events: str
            events_page: str
            event: str
            no_such_query: str

    with pytest.raises(QueryFileError, match=r"in the file but not declared: .*append_events"):

        class Partial(Queries, file="events.sql"):
            append_event: str


def test_each_file_is_bound_once() -> None:
    from dispatcher.store.events import SQL

    with pytest.raises(QueryFileError, match=r"bound by dispatcher\.store\.events\.SQL already"):

        class Again(Queries, file="events.sql"):
            append_event: str
            append_events: str
            lock_idempotency_key: str
            lock_idempotency_keys: str
            find_idempotent_event: str
            find_idempotent_events: str
            events_page: str
            event: str
            stored_payloads: str

    assert SQL.file == "events.sql"


def _store_modules() -> list[str]:
    return [
        f"dispatcher.store.{module.name}"
        for module in pkgutil.iter_modules(dispatcher.store.__path__)
        if not module.ispkg
    ]


def _query_files() -> list[str]:
    folder = resources.files(queries.__name__)
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))


def test_every_file_is_bound_by_a_store_module() -> None:
    for name in _store_modules():
        importlib.import_module(name)
    assert sorted(queries.bound_files()) == _query_files()


async def test_every_statement_is_valid_against_the_schema(db: Database) -> None:
    """Each statement is prepared (parsed, its names resolved, its plan made) by the database,
    as a call would; the ones naming a day's partitions, for a day that has them; the one sent
    only as the rest of another, as sent."""
    for name in _store_modules():
        importlib.import_module(name)
    sent_as = {
        # With the endpoint's one column list written in (store/webhooks.py `with_options`).
        ("webhooks.sql", "create"): webhooks.CREATE.sql,
        ("webhooks.sql", "webhook"): webhooks.WEBHOOK.sql,
        ("webhooks.sql", "webhooks_page"): webhooks.WEBHOOKS_PAGE.sql,
        ("queue.sql", "claim"): queue.CLAIM.sql,
    }
    async with db.acquire() as conn:
        # schema.sql made today's partitions.
        day = await conn.fetchval("SELECT to_char(current_date, 'YYYYMMDD')")
        for file in _query_files():
            for statement in queries.load(file).values():
                sql = sent_as.get((file, statement.name), statement.sql).replace("{day}", day)
                if ";" in sql:  # several statements: the simple protocol only runs them
                    continue
                async with conn.transaction():
                    try:
                        await conn.prepare(sql)
                    except Exception as exc:
                        raise AssertionError(f"{file}: {statement.name}: {exc}") from exc


def test_the_files_ship_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"]["package-data"]
    assert "*.sql" in package_data["dispatcher.store.queries"]
    assert (ROOT / "dispatcher" / "store" / "queries" / "__init__.py").exists()


def test_parameters_are_named_and_numbered_once_by_the_loader() -> None:
    """`@name` becomes asyncpg's `$n` when the file is read, a name used twice one number;
    names inside literals, quoted names, comments and casts are left alone. A call gives the
    values in number order, and refuses a name missing or one the statement lacks."""
    text = """-- name: page
-- A page.
SELECT '@not', "@neither", x::text -- @nor
FROM t WHERE a = @workspace_id AND (b = @since OR c >= @since) AND d <@ e AND f @> @tags
"""
    query = parse(text)["page"]
    assert query.params == ("workspace_id", "since", "tags")
    assert query.sql.endswith("WHERE a = $1 AND (b = $2 OR c >= $2) AND d <@ e AND f @> $3")
    assert "'@not', \"@neither\", x::text -- @nor" in query.sql
    statement = query.statement
    bound = statement(since=2, tags=3, workspace_id=1)
    assert list(bound) == [query.sql, 1, 2, 3]
    with pytest.raises(TypeError, match=r"missing tags; unknown \(none\)"):
        statement(workspace_id=1, since=2)
    with pytest.raises(TypeError, match=r"missing \(none\); unknown other"):
        statement(workspace_id=1, since=2, tags=3, other=4)
    assert statement.many([{"workspace_id": 1, "since": 2, "tags": 3}]) == (query.sql, [(1, 2, 3)])
    with pytest.raises(QueryFileError, match=r"bad.sql: x: numbers its parameters \(\$2\)"):
        parse("-- name: x\n-- X.\nSELECT @a, $2\n", "bad.sql")
    with pytest.raises(QueryFileError, match=r"numbers its parameters \(\$1\): name them"):
        parse("-- name: x\n-- X.\nSELECT $1\n", "bad.sql")
    # A dollar quote, tagged or not, is not a parameter.
    assert parse("-- name: x\n-- X.\nSELECT $$ $1 $$, $f$ @b $f$, @a\n")["x"].params == ("a",)


def test_a_statement_is_declared_a_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement declared anything but `Statement` (say, `str`) is refused at import."""
    importlib.import_module("dispatcher.store.conversations")
    monkeypatch.delitem(queries._BOUND, "conversations.sql")  # as if not imported yet
    with pytest.raises(QueryFileError, match="declare conversation, set_status, conversations_"):

        class Raw(Queries, file="conversations.sql"):
            conversation: str
            set_status: str
            conversations_page: str


def test_no_file_numbers_its_parameters() -> None:
    """Every file names its parameters (`@name`): none writes asyncpg's `$n` itself (the
    loader refuses it, so every file loads), and every statement's text, comments and
    literals aside, has no `$n`."""
    numbered = re.compile(r"(?<![\w$])\$\d")
    for file in _query_files():
        for query in queries.load(file).values():
            assert not numbered.search(_words(query.text)), (file, query.name)


def test_the_claim_and_the_record_give_a_row_up_for_the_same_reasons() -> None:
    """The claim and the record give a row up for the same reasons, written alike in both."""
    reason = re.compile(r"CASE WHEN q\.expunged .*? END", re.S)
    claim = reason.findall(_words(queue.SQL.claim.sql))
    record = reason.findall(_words(queue.SQL.record.sql))
    assert len(claim) == 1 and claim == record


def _words(sql: str) -> str:
    """A statement as the database reads it: comments gone, any run of blanks one space, none
    inside brackets' edges."""
    sql = re.sub(r"\s+", " ", re.sub(r"--[^\n]*", "", sql)).strip()
    return re.sub(r" ([)\]])", r"\1", re.sub(r"([(\[]) ", r"\1", sql))


def test_the_stats_statements_spell_out_the_domains_outcomes_and_buckets() -> None:
    """stats.sql writes out a column per outcome and the histogram bucket by bucket; the one
    home of both is dispatcher.domain.health (OUTCOMES, in the order of a tally's counts, and
    BUCKETS). Every place that spells them out agrees with it."""
    counts = [str(outcome) for outcome in OUTCOMES] + ["delivered", "failed"]
    columns = ", ".join(counts)
    # record_batch's arrays, in rollup_arguments' order; the engine after them.
    arrays = ["text", "text", "timestamptz", *["int"] * len(counts)]
    arrays += ["timestamptz", "timestamptz", "text"]
    unnest = ", ".join(f"${i}::{kind}[]" for i, kind in enumerate(arrays, 1))
    engine = f"${len(arrays) + 1}"
    added = ", ".join(f"a[{i}] + b[{i}]" for i in range(1, BUCKETS + 1))
    totals = ", ".join(f"{c} = r.{c} + excluded.{c}" for c in counts)

    record_batch = _words(stats.SQL.record_batch.sql)
    tally = ", ".join(f"t.{c}" for c in counts)
    assert f"SELECT t.span, t.webhook_id, t.starts_at, {tally}, t.last_success_at, " in record_batch
    assert (
        f"FROM unnest({unnest}) AS t(span, webhook_id, starts_at, {columns}, last_success_at, "
        "last_failure_at, histogram)" in record_batch
    )
    for table, key, latest in (
        ("webhook_stats_minutes", "minute", ""),
        ("webhook_stats_hours", "hour", ", last_success_at, last_failure_at"),
    ):
        assert (
            f"INSERT INTO {table} AS r (webhook_id, {key}, {columns}, response_ms{latest}, engine) "
            f"SELECT webhook_id, starts_at, {columns}, response_ms{latest}, {engine} "
            f"FROM tally WHERE span = '{key}' "
        ) in record_batch
    histograms = "response_ms = dispatcher_add_histograms(r.response_ms, excluded.response_ms)"
    assert record_batch.count(f"SET {totals}, {histograms}") == 2
    functions = _words((Path(stats.__file__).parent / "functions.sql").read_text())
    assert re.findall(r"dispatcher_add_histograms\(.*?ELSE ARRAY\[(.*?)\] END", functions) == [
        added
    ]

    endpoint_health = _words(stats.SQL.endpoint_health.sql)
    assert endpoint_health.count(f"SELECT {columns}, response_ms FROM ") == 3
    sums = ", ".join(f"coalesce(sum({c}), 0) AS {c}" for c in counts)
    assert f"SELECT {sums}, array_agg(response_ms) " in endpoint_health

    per_minute = ", ".join(f"sum({outcome}) AS {outcome}" for outcome in OUTCOMES)
    assert f"SELECT minute, {per_minute} FROM " in _words(stats.SQL.attempts_per_minute.sql)


async def test_the_histogram_sum_is_inlined_into_the_record(db: Database) -> None:
    """dispatcher_add_histograms is a plain SQL expression the planner puts in the upsert
    itself: the record path pays no function call per row (as it did not when the buckets
    were spelled out in the statement)."""
    now = datetime.now(UTC)
    bound = stats.SQL.record_batch(
        spans=["minute", "hour"], webhook_ids=["WH1", "WH1"], starts_at=[now, now],
        success=[1, 1], http_error=[0, 0], timeout=[0, 0], connection_error=[0, 0],
        blocked=[0, 0], delivered=[1, 1], failed=[0, 0], last_success_at=[now, now],
        last_failure_at=[None, None], histograms=[None, None], engine="e1",
    )  # fmt: skip
    async with db.acquire() as conn:
        plan = "\n".join(
            r[0] for r in await conn.fetch("EXPLAIN VERBOSE " + bound.sql, *bound.args)
        )
    assert "Conflict Resolution: UPDATE" in plan
    assert "dispatcher_add_histograms" not in plan
