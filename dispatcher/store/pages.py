"""Keyset pagination, newest first, shared by every list.

A page position is the (created_at, id) of the last row seen, so rows inserted while a client
pages never shift or repeat rows it has already seen.

A page's work is bounded in time (PAGE_TIMEOUT): its index walk reads the rows of the window
newest first and stops at `limit + 1` matches, so a filter that the index does not cover
(an event type, a delivery status, a message direction) over a window of years with few
matches reads every row of the window. Past the limit the statement is cancelled in the
database and the page refused as Overloaded (503 `overloaded`, reason `timeout`), its message
saying how to narrow it (docs/api.md, "Bounds").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic

from dispatcher.errors import Overloaded
from dispatcher.store.database import Connection, Database
from dispatcher.store.queries import Statement
from dispatcher.store.rows import RowT, as_rows

Position = tuple[datetime, str]

# Seconds one page's statement may run; asyncpg cancels it in the database past that.
PAGE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Page(Generic[RowT]):
    rows: list[RowT]
    last: Position | None  # position of the last row when more rows follow, else None


@dataclass
class Filters:
    """WHERE conditions with `{}` standing for the next positional parameter. `alias`: the
    listed table's alias in the page's statement, when it has one (its columns are named
    through it)."""

    conditions: list[str] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)  # bound as they are, whatever their type
    alias: str = ""

    def add(self, condition: str, *values: Any) -> Filters:
        numbers = [f"${len(self.args) + i + 1}" for i in range(len(values))]
        self.conditions.append(condition.format(*numbers))
        self.args.extend(values)
        return self

    def column(self, name: str) -> str:
        """`name` as the statement reads it (through the alias, when there is one)."""
        return f"{self.alias}.{name}" if self.alias else name

    def equal(self, **columns: Any) -> Filters:
        """`column = value` for each column given a value, in the order given. None is a
        filter the caller left out (any value matches): a list's optional filters."""
        for name, value in columns.items():
            if value is not None:
                self.add(f"{self.column(name)} = {{}}", value)
        return self

    def window(self, name: str, since: datetime | None, until: datetime | None) -> Filters:
        """Column `name` from `since`, inclusive, until `until`, exclusive (None: open on that
        side), as every list's `since` and `until` read."""
        if since is not None:
            self.add(f"{self.column(name)} >= {{}}", since)
        if until is not None:
            self.add(f"{self.column(name)} < {{}}", until)
        return self


async def fetch_page(
    db: Database | Connection,
    select: Statement | str,
    row_type: type[RowT],
    filters: Filters,
    limit: int,
    after: Position | None,
) -> Page[RowT]:
    """One page of `select`'s rows as `row_type`s (its columns must include `created_at` and
    `id`, the page position), read on a connection of its own or, given one, on the caller's
    (a list that reads something else first). A page statement (`-- name: ..._page`) has no
    parameters of its own but those its caller put first in `filters.args`, in its order."""
    if isinstance(db, Database):
        async with db.acquire() as conn:
            return await fetch_page(conn, select, row_type, filters, limit, after)
    created_at, row_id = filters.column("created_at"), filters.column("id")
    if after is not None:
        filters.add(f"({created_at}, {row_id}) < ({{}}, {{}})", after[0], after[1])
    where = " AND ".join(filters.conditions) or "TRUE"
    if isinstance(select, Statement):
        select = select.sql
    sql = f"{select} WHERE {where} ORDER BY {created_at} DESC, {row_id} DESC LIMIT {int(limit) + 1}"
    try:
        records = await db.fetch(sql, *filters.args, timeout=PAGE_TIMEOUT)
    except TimeoutError:
        # asyncpg has cancelled the statement (a cancel request to the server); the
        # connection stays usable. Caught here, before the pool's handler, which would take a
        # timeout for a server that is gone and close the connection.
        raise Overloaded(
            f"this page took longer than {PAGE_TIMEOUT:g} s to read: narrow it with "
            "`since` and `until`, or fewer filters, and retry",
            reason="timeout",
        ) from None
    if len(records) > limit:
        last = records[limit - 1]
        return Page(as_rows(row_type, records[:limit]), (last["created_at"], last["id"]))
    return Page(as_rows(row_type, records), None)
