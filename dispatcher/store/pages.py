"""Keyset pagination, newest first, shared by every list.

A page position is the (created_at, id) of the last row seen, so rows inserted while a client
pages never shift or repeat rows it has already seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic

from dispatcher.store.database import Connection
from dispatcher.store.rows import RowT, as_rows

Position = tuple[datetime, str]


@dataclass(frozen=True, slots=True)
class Page(Generic[RowT]):
    rows: list[RowT]
    last: Position | None  # position of the last row when more rows follow, else None


@dataclass
class Filters:
    """WHERE conditions with `{}` standing for the next positional parameter."""

    conditions: list[str] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)  # bound as they are, whatever their type

    def add(self, condition: str, *values: Any) -> Filters:
        numbers = [f"${len(self.args) + i + 1}" for i in range(len(values))]
        self.conditions.append(condition.format(*numbers))
        self.args.extend(values)
        return self


async def fetch_page(
    conn: Connection,
    select: str,
    row_type: type[RowT],
    filters: Filters,
    limit: int,
    after: Position | None,
    alias: str = "",
) -> Page[RowT]:
    """One page of `select`'s rows as `row_type`s (its columns must include `created_at` and
    `id`, the page position)."""
    prefix = f"{alias}." if alias else ""
    if after is not None:
        filters.add(f"({prefix}created_at, {prefix}id) < ({{}}, {{}})", after[0], after[1])
    where = " AND ".join(filters.conditions) or "TRUE"
    sql = (
        f"{select} WHERE {where} "
        f"ORDER BY {prefix}created_at DESC, {prefix}id DESC LIMIT {int(limit) + 1}"
    )
    records = await conn.fetch(sql, *filters.args)
    if len(records) > limit:
        last = records[limit - 1]
        return Page(as_rows(row_type, records[:limit]), (last["created_at"], last["id"]))
    return Page(as_rows(row_type, records), None)
