"""What a JSON value the service stores may be: how deep it nests, and which numbers it holds.

Every free-form JSON value a client hands over (an event's `data`, a webhook's `filter`, the
`data` tried by filter/test) is stored, then read back and serialised on every GET, list,
console page and delivery. A value the serialiser cannot write (orjson stops at 254 levels;
it writes no integer beyond 64 bits) would be stored and then fail every read: so the doors
refuse it, with one rule for all of them (the API, and the SQL outbox function
`dispatcher_publish_event`, which checks the same in the database: functions.sql).

- Depth: at most `MAX_JSON_DEPTH` levels. An object or an array is a level; what it holds
  counts from there: `1` is 0 deep, `{}` and `[1]` are 1 deep, `{"a": [1]}` is 2. 64 is far
  below any serialiser's limit (orjson 254, Postgres' stack, a browser's JSON.parse), and far
  above what an event needs (real payloads nest fewer than 10 levels), and a walk of 64
  levels costs nothing worth counting.
- Numbers: between `MIN_NUMBER` and `MAX_NUMBER` (-2^63 and 2^64 - 1: what 64-bit integers
  hold, signed or unsigned). Such an integer is kept exactly on every door; a number beyond
  (2^64) would be kept exactly by Postgres but read back as a rounded float by the API, so
  it is refused rather than changed.
"""

from __future__ import annotations

from typing import Any

MAX_JSON_DEPTH = 64
MIN_NUMBER = -(2**63)
MAX_NUMBER = 2**64 - 1
DEPTH_PROBLEM = f"must nest at most {MAX_JSON_DEPTH} levels deep (objects and arrays)"
NUMBER_PROBLEM = (
    f"numbers must lie between {MIN_NUMBER} and {MAX_NUMBER} (64-bit integers); "
    "send larger ones as strings"
)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` levels. Iterative (the depth is the sender's
    to choose) and it stops at the first level past the limit."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if level > limit:
            return True
        stack.extend((inner, level + 1) for inner in item)
    return False


def in_range(number: int | float) -> bool:
    """Whether a JSON number may be stored: within 64-bit integers' range (inf and NaN are
    not)."""
    return MIN_NUMBER <= number <= MAX_NUMBER


def json_problem(value: Any) -> str | None:
    """Why `value` cannot be stored as a free-form JSON value, or None. The numbers of a
    request body are checked where it is parsed (api/framework/http.py: an integer beyond 64 bits is
    a float by then), so here the depth alone."""
    return DEPTH_PROBLEM if deeper_than(value, MAX_JSON_DEPTH) else None
