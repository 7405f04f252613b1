"""The lists' WHERE builder (dispatcher/store/pages.py): each list's optional filters and its
since/until window are written by `Filters`, numbered in the order they are added."""

from __future__ import annotations

from datetime import UTC, datetime

from dispatcher.store.pages import Filters

SINCE = datetime(2024, 1, 1, tzinfo=UTC)
UNTIL = datetime(2024, 2, 1, tzinfo=UTC)


def test_a_filter_left_out_adds_no_condition() -> None:
    filters = Filters().add("workspace_id = {}", "ws").equal(status=None, number_id="n")
    assert filters.conditions == ["workspace_id = $1", "number_id = $2"]
    assert filters.args == ["ws", "n"]


def test_a_window_is_since_inclusive_until_exclusive_and_open_where_not_given() -> None:
    assert Filters().window("created_at", SINCE, UNTIL).conditions == [
        "created_at >= $1",
        "created_at < $2",
    ]
    assert Filters().window("created_at", None, UNTIL).conditions == ["created_at < $1"]
    assert Filters().window("created_at", None, None).conditions == []


def test_the_columns_are_named_through_the_alias_after_the_statements_own_parameters() -> None:
    filters = (
        Filters(args=["ev"], alias="d").equal(event_type="a").window("created_at", SINCE, None)
    )
    assert filters.conditions == ["d.event_type = $2", "d.created_at >= $3"]
    assert filters.args == ["ev", "a", SINCE]
    assert filters.column("id") == "d.id"
