"""A subscription's payload filter (`filter`): which events, among those it hears, it gets.

An event goes to the subscription only when its `data` contains the filter, as Postgres'
jsonb containment (`data @> filter`) defines it. The database alone decides a match (in the
fan-out statement, in recover, and for `POST /v1/webhooks/{id}/filter/test`), so that a test
can never disagree with what fan-out does; this module holds only the rules of what may be
stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

FILTER = "filter"
MAX_FILTER_BYTES = 4096


def filter_problem(value: Mapping[str, Any]) -> str | None:
    """Why `value` cannot be a filter, or None. Its size is that of its compact JSON text
    (no white space), as it is stored: whatever the spacing of the request."""
    size = len(orjson.dumps(value))
    if size > MAX_FILTER_BYTES:
        return f"must be at most {MAX_FILTER_BYTES} bytes of JSON ({size})"
    return None


def stored_filter(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The filter as stored: `{}` contains nothing, so it filters nothing and is null."""
    return dict(value) if value else None
