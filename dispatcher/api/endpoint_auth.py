"""A webhook's `auth` as the API takes and answers it (the rules: domain/endpoint_auth.py).

Created with its `clientSecret`; answered without it (write-only: `writeOnly` in the OpenAPI
document). A PATCH's `auth` may leave `clientSecret` out to keep the stored one, when its
`tokenUrl` and `clientId` are the stored ones (`kept_secret`); null removes `auth`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from dispatcher.api.models import Body, WebhookUrl
from dispatcher.domain import endpoint_auth as rules
from dispatcher.errors import FieldError, ValidationFailed

ClientId = Annotated[
    str,
    Field(min_length=1, max_length=rules.MAX_CLIENT_ID_LENGTH, pattern=rules.VSCHAR_PATTERN),
]
ClientSecret = Annotated[
    str,
    Field(
        min_length=1,
        max_length=rules.MAX_CLIENT_SECRET_LENGTH,
        pattern=rules.VSCHAR_PATTERN,
        json_schema_extra={"writeOnly": True},
        description="write-only: never answered",
    ),
]
Scope = Annotated[
    str, Field(min_length=1, max_length=rules.MAX_SCOPE_LENGTH, pattern=rules.SCOPE_PATTERN)
]
Audience = Annotated[
    str,
    Field(min_length=1, max_length=rules.MAX_AUDIENCE_LENGTH, pattern=rules.VSCHAR_PATTERN),
]


class OAuth2Auth(Body):
    """OAuth 2.0 client credentials (RFC 6749 section 4.4): the engine gets a bearer token
    from `tokenUrl` (HTTP Basic client authentication) and sends it with every attempt."""

    type: Literal["oauth2"]
    tokenUrl: WebhookUrl
    clientId: ClientId
    clientSecret: ClientSecret
    scope: Scope | None = None
    audience: Audience | None = None


class OAuth2AuthChange(Body):
    """`auth` in a PATCH: as created; without `clientSecret`, the stored one is kept when
    `tokenUrl` and `clientId` are the stored ones."""

    type: Literal["oauth2"]
    tokenUrl: WebhookUrl
    clientId: ClientId
    clientSecret: ClientSecret | None = None
    scope: Scope | None = None
    audience: Audience | None = None


class WebhookAuth(TypedDict):
    """A webhook's `auth` as answered: as given, never its `clientSecret` (an unset `scope`
    or `audience` is absent)."""

    type: Literal["oauth2"]
    tokenUrl: str
    clientId: str
    scope: NotRequired[str]
    audience: NotRequired[str]


def stored(auth: OAuth2Auth | None) -> dict[str, Any] | None:
    """A create's `auth` as stored (None: no auth)."""
    return None if auth is None else rules.stored(auth.model_dump())


def kept_secret(
    auth: OAuth2AuthChange | None, current: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """A PATCH's `auth` as stored, the stored secret kept when it may be (a 400 naming
    `body.auth.clientSecret` when it is left out and cannot be); None removes it."""
    if auth is None:
        return None
    try:
        return rules.with_kept_secret(auth.model_dump(), current)
    except rules.MissingSecret as exc:
        raise ValidationFailed([FieldError("body.auth.clientSecret", str(exc))]) from None


def answered(auth: Mapping[str, Any] | None) -> WebhookAuth | None:
    shown = rules.answered(auth)
    return None if shown is None else WebhookAuth(**shown)  # type: ignore[typeddict-item]
