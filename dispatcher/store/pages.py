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

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic

from dispatcher.errors import Overloaded
from dispatcher.store.database import Connection, Database
from dispatcher.store.queries import Bound
from dispatcher.store.rows import RowT, as_rows

Position = tuple[datetime, str]

# Seconds one page's statement may run; asyncpg cancels it in the database past that.
PAGE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Page(Generic[RowT]):
    rows: list[RowT]
    last: Position | None  # position of the last row when more rows follow, else None


# The ends of time as asyncpg sends them (-infinity, infinity): a page statement's window and
# position are always conditions on its index, open ends included, so that one plan (a generic
# one too, as Postgres makes for a statement prepared and run often) walks the index from the
# position, whatever the values.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def window(since: datetime | None, until: datetime | None) -> dict[str, datetime]:
    """A list's `since` (inclusive) and `until` (exclusive), as a page statement's @since and
    @until: an open end is the end of time."""
    return {"since": since or EARLIEST, "until": until or LATEST}


def paging(after: Position | None, limit: int) -> dict[str, Any]:
    """A page statement's @after_at, @after_id (the position of the last row seen; the start
    when none) and @limit (one row more than the page holds: whether more follow)."""
    after_at, after_id = after if after is not None else (LATEST, "")
    return {"after_at": after_at, "after_id": after_id, "limit": int(limit) + 1}


async def fetch_page(
    db: Database | Connection, page: Bound, row_type: type[RowT], limit: int
) -> Page[RowT]:
    """One page of a page statement's rows (`-- name: ..._page`, bound with `paging`'s values
    for `limit`) as `row_type`s (its columns include `created_at` and `id`, the position), read
    on a connection of its own or, given one, on the caller's (a list that reads something else
    first)."""
    if isinstance(db, Database):
        async with db.acquire() as conn:
            return await fetch_page(conn, page, row_type, limit)
    try:
        records = await db.fetch(*page, timeout=PAGE_TIMEOUT)
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
