"""What may be stored as a payload filter (whether data matches one is the database's call:
tests/api/test_payload_filter.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain.payload_filter import MAX_FILTER_BYTES, filter_problem, stored_filter


def text_of(size: int) -> dict[str, Any]:
    """A filter whose compact JSON is exactly `size` bytes: {"k":"vvv…"}."""
    return {"k": "v" * (size - len('{"k":""}'))}


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ({}, False),
        ({"direction": "incoming"}, False),
        ({"a": {"b": [1, 2, {"c": None}]}}, False),
        (text_of(MAX_FILTER_BYTES), False),
        (text_of(MAX_FILTER_BYTES + 1), True),
        ({"k": "\u00e9" * 2100}, True),  # bytes, not characters
        ({"k": list(range(2000))}, True),
    ],
)
def test_at_most_4_kib_of_compact_json(value: dict[str, Any], refused: bool) -> None:
    problem = filter_problem(value)
    assert (problem is not None) == refused
    if problem is not None:
        assert f"at most {MAX_FILTER_BYTES} bytes" in problem


def test_an_empty_filter_is_stored_as_none() -> None:
    assert stored_filter(None) is None
    assert stored_filter({}) is None
    assert stored_filter({"a": 1}) == {"a": 1}
