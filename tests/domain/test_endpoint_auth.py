"""The pure rules of an endpoint's `auth` (domain/endpoint_auth.py), as tables: the token
request, the reading of the token endpoint's answer, a token's lifetime, what an answer shows
and when a PATCH keeps the stored secret."""

from __future__ import annotations

import base64
import urllib.parse
from typing import Any

import orjson
import pytest

from dispatcher.domain import endpoint_auth as rules
from dispatcher.domain.endpoint_auth import OAuth2Client, Token, TokenRefused

STORED = {
    "type": "oauth2",
    "tokenUrl": "https://auth.example.com/token",
    "clientId": "id 1",
    "clientSecret": "p@ss:w/rd+",
}
NO_SECRET = {k: v for k, v in STORED.items() if k != "clientSecret"}


def test_the_request_is_the_client_credentials_grant_with_basic_authentication() -> None:
    client = OAuth2Client.of({**STORED, "scope": "a b", "audience": "https://api"})
    basic, form = rules.token_request(client)
    user, _, password = base64.b64decode(basic.removeprefix("Basic ")).decode().partition(":")
    assert urllib.parse.unquote_plus(user) == "id 1"
    assert urllib.parse.unquote_plus(password) == "p@ss:w/rd+"
    assert ":" not in password  # the secret's own colon is encoded
    assert urllib.parse.parse_qs(form.decode()) == {
        "grant_type": ["client_credentials"],
        "scope": ["a b"],
        "audience": ["https://api"],
    }
    assert b"p%40ss" not in form and b"rd" not in form  # never in the body
    _, bare = rules.token_request(OAuth2Client.of(STORED))
    assert bare == b"grant_type=client_credentials"


def answer(**fields: Any) -> bytes:
    return orjson.dumps({"access_token": "abc.DEF-1_~+/==", "token_type": "Bearer", **fields})


@pytest.mark.parametrize(
    ("status", "body", "read"),
    [
        (200, answer(expires_in=3600), Token("abc.DEF-1_~+/==", 3570.0)),
        (200, answer(token_type="bearer", expires_in="120"), Token("abc.DEF-1_~+/==", 90.0)),
        (200, answer(expires_in=20), Token("abc.DEF-1_~+/==", 10.0)),
        (200, answer(), Token("abc.DEF-1_~+/==", rules.DEFAULT_LIFETIME)),
        (200, answer(expires_in=True), Token("abc.DEF-1_~+/==", rules.DEFAULT_LIFETIME)),
        (200, answer(expires_in=0), Token("abc.DEF-1_~+/==", 0.0)),
    ],
)
def test_a_token_is_read_with_its_lifetime(status: int, body: bytes, read: Token) -> None:
    assert rules.read_token(status, body) == read


@pytest.mark.parametrize(
    ("status", "body", "error", "code"),
    [
        (500, b"", "OAuth token endpoint: HTTP 500", None),
        (500, b'{"error": "server_error"}', "OAuth token endpoint: HTTP 500", "server_error"),
        (401, b'{"error": "invalid_client"}', "OAuth token endpoint: HTTP 401", "invalid_client"),
        (400, b'{"error": "bad\\"code"}', "OAuth token endpoint: HTTP 400", None),
        (400, b'{"error": "' + b"x" * 65 + b'"}', "OAuth token endpoint: HTTP 400", None),
        (302, b"", "OAuth token endpoint: HTTP 302", None),
        (200, b"<html>", "OAuth token endpoint: the answer is not JSON", None),
        (200, b"[1]", "OAuth token endpoint: the answer is not a JSON object", None),
        (200, b"{}", "OAuth token endpoint: no usable access_token in the answer", None),
        (
            200,
            answer(access_token="a\r\nX-Injected: 1"),
            "OAuth token endpoint: no usable access_token in the answer",
            None,
        ),
        (
            200,
            answer(token_type="mac"),
            "OAuth token endpoint: the token_type is not Bearer",
            None,
        ),
    ],
)
def test_a_failure_is_said_plainly(status: int, body: bytes, error: str, code: str | None) -> None:
    with pytest.raises(TokenRefused) as refused:
        rules.read_token(status, body)
    assert (str(refused.value), refused.value.code) == (error, code)


def test_answers_show_everything_but_the_secret() -> None:
    assert rules.answered(None) is None
    assert rules.answered(STORED) == {
        "type": "oauth2",
        "tokenUrl": "https://auth.example.com/token",
        "clientId": "id 1",
    }
    assert rules.answered({**STORED, "scope": "s"}) == {**NO_SECRET, "scope": "s"}
    assert rules.secret_values(STORED) == ("p@ss:w/rd+",)
    assert rules.secret_values(None) == ()


@pytest.mark.parametrize(
    ("given", "current", "stored"),
    [
        ({**STORED, "clientSecret": "new"}, None, {**STORED, "clientSecret": "new"}),
        ({**NO_SECRET, "scope": "s"}, STORED, {**STORED, "scope": "s"}),
        ({**NO_SECRET, "scope": None}, {**STORED, "scope": "s"}, STORED),
        (NO_SECRET, None, None),
        ({**NO_SECRET, "tokenUrl": "https://other.example.com/t"}, STORED, None),
        ({**NO_SECRET, "clientId": "other"}, STORED, None),
    ],
)
def test_a_patch_keeps_the_secret_only_for_the_same_token_url_and_client(
    given: dict[str, Any], current: dict[str, Any] | None, stored: dict[str, Any] | None
) -> None:
    if stored is None:
        with pytest.raises(rules.MissingSecret):
            rules.with_kept_secret(given, current)
    else:
        assert rules.with_kept_secret(given, current) == stored
