"""The endpoint's one column list (store/webhooks.py), made from domain/endpoints.py."""

from __future__ import annotations

import pytest

from dispatcher.domain.endpoints import OPTIONS
from dispatcher.store import queue, webhooks


def test_a_patch_sets_the_options_it_names_each_a_parameter() -> None:
    assert webhooks.update_statement(["url", "rate_limit"]) == (
        "UPDATE webhooks SET url = $2, rate_limit = $3 WHERE id = $1"
    )


@pytest.mark.parametrize("names", [[], ["url", "secret"], ["url = 'x'; --"]])
def test_a_patch_names_only_options(names: list[str]) -> None:
    with pytest.raises(ValueError, match="not endpoint options"):
        webhooks.update_statement(names)


def test_every_statement_of_an_endpoint_has_every_option() -> None:
    for sql in (webhooks.CREATE, webhooks.WEBHOOK, webhooks.WEBHOOKS_PAGE, queue.CLAIM.sql):
        assert "{" not in sql.replace("'{}'", "")
        for option in OPTIONS:
            assert option in sql, option


def test_answers_withhold_the_secret_headers_values() -> None:
    answered = webhooks.option_columns(answered=True)
    assert "jsonb_object_keys(secret_headers)" in answered
    assert ", secret_headers," not in f", {answered},"
    assert ", secret_headers," in f", {webhooks.option_columns()},"
