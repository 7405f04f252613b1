"""Query-string filters, validated like bodies (errors name `query.<field>`)."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from dispatcher.domain import ids
from dispatcher.domain.phone import is_e164
from dispatcher.errors import FieldError, ValidationFailed


def _fail(name: str, message: str) -> ValidationFailed:
    return ValidationFailed([FieldError(f"query.{name}", message)])


def query_choice(request: web.Request, name: str, allowed: Sequence[str]) -> str | None:
    value = request.query.get(name)
    if value is None:
        return None
    if value not in allowed:
        raise _fail(name, f"must be one of: {', '.join(allowed)}")
    return value


def query_id(request: web.Request, name: str, prefix: str) -> str | None:
    value = request.query.get(name)
    if value is None:
        return None
    if not ids.is_id(value, prefix):
        raise _fail(name, f"must be an id starting with {prefix}")
    return value


def query_e164(request: web.Request, name: str) -> str | None:
    value = request.query.get(name)
    if value is None:
        return None
    if not is_e164(value):
        raise _fail(name, "must be a phone number in E.164 form, like +15555550123")
    return value
