"""A subscription's payload filter (`filter`): which events, among those it hears, it gets.

An event goes to the subscription only when its `data` contains the filter, as Postgres'
jsonb containment (`data @> filter`) defines it. The database alone decides a match (in the
fan-out statement, in recover, and for `POST /v1/webhooks/{id}/filter/test`), so that a test
can never disagree with what fan-out does; this module holds only the rules of what may be
stored, and the bounds that keep one comparison cheap.

Why the bounds: `@>` looks each element of a filter's array up in the data's array at the
same place, one by one, so its work is (the filter's array elements) x (that data array's
elements); fan-out pays it once per subscription, inside the publishing transaction. A filter
of 2,000 array elements against an event array of 500,000 took 30 s. So both sides are
bounded: the filter here (every door that stores or tries a filter takes `filter_problem`),
the data in the database (`dispatcher_filter_passes`, functions.sql: an array of the data
longer than `MAX_COMPARED_ARRAY_ELEMENTS`, where the filter has an array, is not looked into
and does not pass). An array in a filter holds only scalars, so that each of its elements is
looked up in one data array (an object or array among them would be compared with every
object or array of the data array, recursively: about 4x the cost per pair, measured). With
every bound at its limit, one comparison is at most 4 x 128 comparisons of scalars of at most
64 bytes, and 16 key lookups: 10,000 filtered subscriptions stay within the fan-out's promise
(under 1 s; benchmarks/, scenario 9, measures exactly that worst case).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

FILTER = "filter"
MAX_FILTER_BYTES = 4096
# Every value below the filter's top object: members' values and array elements, nested ones
# included (each a lookup in the data, and the bound on its depth).
MAX_FILTER_VALUES = 16
# The elements of all the filter's arrays together.
MAX_FILTER_ARRAY_ELEMENTS = 4
# Bytes of JSON of one element of a filter's array: each is compared with up to
# MAX_COMPARED_ARRAY_ELEMENTS data elements, and comparing two long numbers with a common
# prefix costs about 250 ns at 900 digits (measured), so their length is bounded too.
MAX_FILTER_ARRAY_ELEMENT_BYTES = 64
# A data array longer than this is not compared with a filter's array (schema.sql,
# dispatcher_filter_passes, holds the same number: tests/api/test_filter_bounds.py tries
# arrays at it and past it).
MAX_COMPARED_ARRAY_ELEMENTS = 128

_SCALARS = (str, int, float, bool, type(None))


def _json_size(scalar: Any) -> int:
    """Bytes of `scalar` as compact JSON (an int by its digits: orjson takes 64 bits only)."""
    if isinstance(scalar, int) and not isinstance(scalar, bool):
        return len(str(scalar))
    return len(orjson.dumps(scalar))


def _where(path: tuple[str, ...]) -> str:
    return "filter" + "".join(f"[{orjson.dumps(p).decode()}]" for p in path)


def filter_problem(value: Mapping[str, Any]) -> str | None:
    """Why `value` cannot be a filter, or None: the counts first (values, array elements,
    what arrays hold; see the module's docstring for why each exists), then its size, that of
    its compact JSON text (no white space), as it is stored, whatever the spacing of the
    request."""
    values = array_elements = 0
    # An explicit stack, not recursion: the request parser accepts deeper JSON than Python's
    # recursion limit would like, and the count stops the walk early anyway.
    stack: list[tuple[tuple[str, ...], Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, Mapping):
            children = [((*path, str(k)), v) for k, v in node.items()]
        elif isinstance(node, list):
            array_elements += len(node)
            if array_elements > MAX_FILTER_ARRAY_ELEMENTS:
                return (
                    f"its arrays must hold at most {MAX_FILTER_ARRAY_ELEMENTS} elements "
                    "in all (a data array is searched once for each)"
                )
            for element in node:
                if not isinstance(element, _SCALARS):
                    kind = "an object" if isinstance(element, Mapping) else "an array"
                    return (
                        "an array in a filter holds only strings, numbers, booleans and null "
                        f"({_where(path)} holds {kind})"
                    )
                if _json_size(element) > MAX_FILTER_ARRAY_ELEMENT_BYTES:
                    return (
                        f"an element of a filter's array must be at most "
                        f"{MAX_FILTER_ARRAY_ELEMENT_BYTES} bytes of JSON (one in {_where(path)} "
                        "is longer)"
                    )
            children = [((*path, str(i)), v) for i, v in enumerate(node)]
        else:
            continue
        values += len(children)
        if values > MAX_FILTER_VALUES:
            return f"must hold at most {MAX_FILTER_VALUES} values in all, nested ones included"
        stack.extend(children)
    # Measured once the shape is known to be small (a deep value is refused above, before a
    # serialiser could fail on it).
    size = len(orjson.dumps(value))
    if size > MAX_FILTER_BYTES:
        return f"must be at most {MAX_FILTER_BYTES} bytes of JSON ({size})"
    return None


def stored_filter(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The filter as stored: `{}` contains nothing, so it filters nothing and is null."""
    return dict(value) if value else None
