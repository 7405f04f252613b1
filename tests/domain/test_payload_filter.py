"""What may be stored as a payload filter (whether data matches one is the database's call:
tests/api/test_payload_filter.py). Each bound is tried at its limit and one past it, in
several shapes: the bound is on what the filter holds, wherever it holds it."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain.payload_filter import (
    MAX_FILTER_ARRAY_ELEMENT_BYTES,
    MAX_FILTER_ARRAY_ELEMENTS,
    MAX_FILTER_BYTES,
    MAX_FILTER_VALUES,
    filter_problem,
    stored_filter,
)


def text_of(size: int) -> dict[str, Any]:
    """A filter whose compact JSON is exactly `size` bytes: {"k":"vvv…"}."""
    return {"k": "v" * (size - len('{"k":""}'))}


def nested(depth: int) -> dict[str, Any]:
    """{"k": {"k": … 1}}: `depth` values, one per level."""
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return dict(value)


def flat(count: int) -> dict[str, Any]:
    return {f"k{i}": i for i in range(count)}


A = MAX_FILTER_ARRAY_ELEMENTS
V = MAX_FILTER_VALUES


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ({}, False),
        ({"direction": "incoming"}, False),
        ({"a": {"b": [1, "x", None, True]}}, False),
        (text_of(MAX_FILTER_BYTES), False),
        (text_of(MAX_FILTER_BYTES + 1), True),
        ({"k": "\u00e9" * 2100}, True),  # bytes, not characters
    ],
)
def test_at_most_4_kib_of_compact_json(value: dict[str, Any], refused: bool) -> None:
    problem = filter_problem(value)
    assert (problem is not None) == refused
    if problem is not None:
        assert f"at most {MAX_FILTER_BYTES} bytes" in problem


def test_the_reported_filter_is_refused() -> None:
    """The probe's: a 4 KiB filter of about 2,040 array elements."""
    problem = filter_problem({"k": [0] * 2040})
    assert problem is not None
    assert f"at most {MAX_FILTER_ARRAY_ELEMENTS} elements" in problem


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ({"tags": list(range(A))}, False),
        ({"tags": list(range(A + 1))}, True),
        ({"tags": ["x"] * (A + 1)}, True),  # repeated elements count: each is searched for
        ({"a": list(range(A // 2)), "b": list(range(A - A // 2))}, False),
        ({"a": list(range(A // 2)), "b": list(range(A - A // 2 + 1))}, True),  # in all
        ({"a": {"b": {"c": list(range(A))}}}, False),
        ({"a": {"b": {"c": list(range(A))}}, "d": [1]}, True),  # nested arrays count too
        ({"a": [], "b": [], "c": []}, False),
    ],
)
def test_array_elements_are_bounded_in_all(value: dict[str, Any], refused: bool) -> None:
    problem = filter_problem(value)
    assert (problem is not None) == refused, problem
    if problem is not None:
        assert f"at most {A} elements" in problem


@pytest.mark.parametrize(
    "value",
    [
        {"items": [{"sku": "X"}]},
        {"items": [[1]]},
        {"a": {"b": [1, {"c": 2}]}},
        {"a": {"b": [[]]}},
    ],
)
def test_arrays_hold_only_scalars(value: dict[str, Any]) -> None:
    problem = filter_problem(value)
    assert problem is not None
    assert "only strings, numbers, booleans and null" in problem
    assert "filter[" in problem  # where


E = MAX_FILTER_ARRAY_ELEMENT_BYTES


@pytest.mark.parametrize(
    ("element", "refused"),
    [
        ("s" * (E - 2), False),  # with its quotes
        ("s" * (E - 1), True),
        ("\u00e9" * ((E - 2) // 2), False),  # bytes, not characters
        ("\u00e9" * ((E - 2) // 2 + 1), True),
        (int("9" * 18), False),
        (-int("9" * 18), False),
        (int("9" * (E + 1)), True),  # beyond 64 bits: measured by its digits, no crash
        (0.1, False),
    ],
)
def test_each_array_element_is_bounded_in_bytes(element: Any, refused: bool) -> None:
    problem = filter_problem({"tags": [element]})
    assert (problem is not None) == refused, problem
    if problem is not None:
        assert f"at most {E} bytes" in problem


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        (flat(V), False),
        (flat(V + 1), True),
        (nested(V), False),
        (nested(V + 1), True),  # depth is bounded by the same count
        ({"a": flat(V - 1)}, False),
        ({"a": flat(V)}, True),
        ({"a": flat(V - 2 - 3), "t": [1, 2, 3]}, False),  # array elements are values too
        ({"a": flat(V - 2 - 2), "t": [1, 2, 3]}, True),
    ],
)
def test_values_are_bounded_in_all(value: dict[str, Any], refused: bool) -> None:
    problem = filter_problem(value)
    assert (problem is not None) == refused, problem
    if problem is not None:
        assert f"at most {V} values" in problem


def test_a_deep_filter_is_refused_without_recursion() -> None:
    """Far deeper than Python's recursion limit: refused by the count, not by a crash."""
    value: Any = 1
    for _ in range(5000):
        value = {"k": value}
    # Its compact JSON is over the byte bound as well; the value count alone refuses it too.
    assert filter_problem(value) is not None


def test_an_empty_filter_is_stored_as_none() -> None:
    assert stored_filter(None) is None
    assert stored_filter({}) is None
    assert stored_filter({"a": 1}) == {"a": 1}
