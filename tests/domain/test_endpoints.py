"""The one description of an endpoint's options (domain/endpoints.py)."""

from __future__ import annotations

from dispatcher.domain import endpoints
from dispatcher.domain.endpoints import EndpointChanges, EndpointOptions, changed_options


def test_a_change_names_the_options_and_enabled_only() -> None:
    assert set(EndpointChanges.__annotations__) == {*endpoints.OPTIONS, "enabled"}


def test_the_changed_options_come_from_the_options_in_column_order() -> None:
    changes: dict[str, object] = {"rate_limit": 5, "enabled": False, "url": "http://x", "x; --": 1}
    assert changed_options(changes) == ["url", "rate_limit"]


def test_write_only_options_are_options() -> None:
    assert set(endpoints.OPTIONS) >= endpoints.WRITE_ONLY


def test_options_default_to_what_a_create_leaves_out() -> None:
    options = EndpointOptions(url="https://example.com/hook", events=["contact.updated"])
    assert options.headers == {} and options.secret_headers == {}
    assert options.ordering == "none"
    assert options.max_concurrency is None and options.rate_limit is None
