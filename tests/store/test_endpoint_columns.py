"""The endpoint's one column list (store/webhooks.py), made from domain/endpoints.py."""

from __future__ import annotations

import pytest

from dispatcher.domain.endpoints import OPTIONS
from dispatcher.store import queue, webhooks


def test_a_patch_sets_the_options_it_names_each_a_parameter() -> None:
    """Each option set is a parameter named after it; the webhook is `webhook_id`."""
    statement = webhooks.update_statement(["url", "rate_limit"])
    assert statement.sql == "UPDATE webhooks SET url = $1, rate_limit = $2 WHERE id = $3"
    assert statement.params == ("url", "rate_limit", "webhook_id")
    bound = statement(webhook_id="WH1", rate_limit=5, url="https://x.test")
    assert list(bound) == [statement.sql, "https://x.test", 5, "WH1"]


@pytest.mark.parametrize("names", [[], ["url", "secret"], ["url = 'x'; --"]])
def test_a_patch_names_only_options(names: list[str]) -> None:
    with pytest.raises(ValueError, match="not endpoint options"):
        webhooks.update_statement(names)


def test_every_statement_of_an_endpoint_has_every_option() -> None:
    for statement in (webhooks.CREATE, webhooks.WEBHOOK, webhooks.WEBHOOKS_PAGE, queue.CLAIM):
        sql = statement.sql
        assert "{" not in sql.replace("'{}'", "")
        for option in OPTIONS:
            assert option in sql, option


def test_a_new_webhook_takes_each_option_by_its_name() -> None:
    assert webhooks.CREATE.params == ("id", "workspace_id", "secret", "now", *OPTIONS)


def test_answers_withhold_the_secret_headers_values() -> None:
    answered = webhooks.option_columns(answered=True)
    assert "jsonb_object_keys(secret_headers)" in answered
    assert ", secret_headers," not in f", {answered},"
    assert ", secret_headers," in f", {webhooks.option_columns()},"
