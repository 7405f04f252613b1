"""An endpoint's `auth`: how its attempts authenticate to the receiver (docs/webhooks.md,
"Authentication"). One kind today, OAuth 2.0 client credentials (RFC 6749 section 4.4):

    {"type": "oauth2", "tokenUrl": ..., "clientId": ..., "clientSecret": ...,
     "scope": ...?, "audience": ...?}

Stored as given, in these API names (`webhooks.auth`, jsonb; null: no auth), the client
secret with it, as the values of the secret headers are stored. `clientSecret` is
write-only: an answer shows `auth` without it (`answered`, and the store's answered column
list, `WITHHELD_KEY`), as it shows `secretHeaderNames` without their values.

A PATCH replaces `auth` whole (null removes it). One exception, so that a client need not
keep the secret to change a scope: a PATCH whose `auth` leaves `clientSecret` out keeps the
stored secret when the stored `auth` has the same `tokenUrl` and `clientId`; otherwise (no
stored auth, or another token URL or client) the secret is required (`with_kept_secret`):
the stored secret is never sent to a token URL or for a client it was not given for.

The token request and its answer are read here too (pure: no I/O): the engine
(engine/oauth.py) sends what `token_request` makes and reads the answer with `read_token`.
The client authenticates with HTTP Basic (RFC 6749 section 2.3.1: each part
form-urlencoded, then base64), the scheme every authorization server must support; `scope`
and `audience` go in the form body when set.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

AUTH = "auth"  # the API's field, the option's column
OAUTH2 = "oauth2"  # `type`
TOKEN_URL = "tokenUrl"
CLIENT_ID = "clientId"
CLIENT_SECRET = "clientSecret"
SCOPE = "scope"
AUDIENCE = "audience"
KEYS = ("type", TOKEN_URL, CLIENT_ID, CLIENT_SECRET, SCOPE, AUDIENCE)

# The key an answer never shows (the store drops it from the answered column: `auth - '...'`).
WITHHELD_KEY = CLIENT_SECRET

# -- bounds (the API's model states them; docs/webhooks.md too) --------------------------------
MAX_CLIENT_ID_LENGTH = 255
MAX_CLIENT_SECRET_LENGTH = 1024
MAX_SCOPE_LENGTH = 1024
MAX_AUDIENCE_LENGTH = 2048

# RFC 6749 appendix A: a client id or secret is VSCHAR (%x20-7E); scope tokens are NQCHAR
# (%x21 / %x23-5B / %x5D-7E) separated by single spaces.
VSCHAR_PATTERN = r"^[\x20-\x7e]+$"
SCOPE_PATTERN = r"^[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*$"
# RFC 6750 section 2.1: what a bearer token may be (so it can be one header value).
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# RFC 6749 section 5.2: an `error` code's characters (NQSCHAR), kept short in lastError.
_ERROR_CODE = re.compile(r"[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}")

# What an attempt records when the token endpoint failed (docs/delivery.md): the prefix tells
# it apart from the receiver's own failures in `lastError` and the attempt log.
TOKEN_ENDPOINT = "OAuth token endpoint"

# How long a token is kept when its answer gives no `expires_in` (a 401 refreshes it sooner).
DEFAULT_LIFETIME = 3600.0
# A token is renewed this long before it expires (but never sooner than half its lifetime).
RENEW_BEFORE = 30.0


class MissingSecret(ValueError):
    """A PATCH's `auth` without `clientSecret` that cannot keep the stored one."""


def answered(auth: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`auth` as an answer shows it: as stored, but the secret (an unset scope or audience
    is absent, as it was given)."""
    if auth is None:
        return None
    return {key: auth[key] for key in KEYS if key != WITHHELD_KEY and key in auth}


def stored(given: Mapping[str, Any]) -> dict[str, Any]:
    """A given `auth` as it is stored: its keys set, in their order (unset optional ones left
    out)."""
    return {key: given[key] for key in KEYS if given.get(key) is not None}


def with_kept_secret(given: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """A PATCH's `auth` as it will be stored: given whole, the stored `clientSecret` kept
    when the given one leaves it out and the token URL and client are the stored ones;
    MissingSecret when it cannot be kept."""
    auth = stored(given)
    if CLIENT_SECRET in auth:
        return auth
    if (
        current is None
        or current.get("type") != auth.get("type")
        or current.get(TOKEN_URL) != auth.get(TOKEN_URL)
        or current.get(CLIENT_ID) != auth.get(CLIENT_ID)
        or not current.get(CLIENT_SECRET)
    ):
        raise MissingSecret("is required unless the stored auth has the same tokenUrl and clientId")
    return stored({**auth, CLIENT_SECRET: current[CLIENT_SECRET]})


class OAuth2Client(NamedTuple):
    """What the engine needs of a stored `auth` of type oauth2 (hashable: the token cache's
    key, so a change of any part of it is a new token)."""

    token_url: str
    client_id: str
    client_secret: str
    scope: str | None
    audience: str | None

    @classmethod
    def of(cls, auth: Mapping[str, Any]) -> OAuth2Client:
        """The client of a stored `auth`; KeyError or ValueError when it is not a whole
        oauth2 one (stored past the API)."""
        if auth.get("type") != OAUTH2:
            raise ValueError("not an oauth2 auth")
        return cls(
            str(auth[TOKEN_URL]),
            str(auth[CLIENT_ID]),
            str(auth[CLIENT_SECRET]),
            auth.get(SCOPE),
            auth.get(AUDIENCE),
        )


def token_request(client: OAuth2Client) -> tuple[str, bytes]:
    """(Authorization header value, form body) of the client credentials grant."""
    user = urllib.parse.quote_plus(client.client_id)
    password = urllib.parse.quote_plus(client.client_secret)
    basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    form = [("grant_type", "client_credentials")]
    if client.scope:
        form.append(("scope", client.scope))
    if client.audience:
        form.append(("audience", client.audience))
    return basic, urllib.parse.urlencode(form).encode("ascii")


class Token(NamedTuple):
    value: str  # the access token (sent as `Authorization: Bearer <value>`)
    lifetime: float  # seconds it may be used from when it was asked for


class TokenRefused(Exception):
    """The token endpoint's answer gave no usable token; the message is the attempt's
    `lastError` (it never quotes what the endpoint sent); `code`, the RFC's error code of an
    error answer when it gives a well-formed one (`invalid_client`), for the engine's log."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def token_failure(detail: str) -> str:
    return f"{TOKEN_ENDPOINT}: {detail}"


def read_token(status: int, body: bytes) -> Token:
    """The token of a token endpoint's answer (RFC 6749 section 5.1), or TokenRefused saying
    plainly why not: `OAuth token endpoint: HTTP 500` for an error status (the RFC's error
    code, `invalid_client`, apart in `code`)."""
    if not 200 <= status < 300:
        raise TokenRefused(token_failure(f"HTTP {status}"), _error_code(body))
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise TokenRefused(token_failure("the answer is not JSON")) from None
    if not isinstance(answer, dict):
        raise TokenRefused(token_failure("the answer is not a JSON object"))
    value = answer.get("access_token")
    if not isinstance(value, str) or not _B64TOKEN.fullmatch(value) or len(value) > 16384:
        raise TokenRefused(token_failure("no usable access_token in the answer"))
    kind = answer.get("token_type")
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise TokenRefused(token_failure("the token_type is not Bearer"))
    return Token(value, lifetime(answer.get("expires_in")))


def lifetime(expires_in: object) -> float:
    """How long a token is used: `expires_in` less RENEW_BEFORE (at most half of it taken
    off); DEFAULT_LIFETIME without a usable `expires_in`."""
    if isinstance(expires_in, str) and expires_in.isdigit():  # some servers send a string
        expires_in = int(expires_in)
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
        return DEFAULT_LIFETIME
    if expires_in <= 0:
        return 0.0
    return float(expires_in) - min(RENEW_BEFORE, expires_in / 2)


def _error_code(body: bytes) -> str | None:
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    code = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(code, str) and _ERROR_CODE.fullmatch(code):
        return code
    return None


def secret_values(auth: Mapping[str, Any] | None) -> tuple[str, ...]:
    """What an attempt with this `auth` sends in secret (kept out of excerpts, with the
    token: domain/redaction.py)."""
    if not auth or not auth.get(CLIENT_SECRET):
        return ()
    return (str(auth[CLIENT_SECRET]),)
