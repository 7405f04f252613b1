"""Query strings, held to each route's declaration like bodies (errors name `query.<name>`).

Every route declares the query parameters it takes, whether it takes a body, and whether it
needs a key (the OpenAPI document is that declaration: app.py hands `openapi.route_inputs()`
to `declared_inputs`). A parameter the route does not declare, or one sent twice, is refused
rather than ignored or resolved by picking one of its values, as an unknown body field is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from multidict import MultiMapping

from dispatcher.api.http import Handler, read_no_body
from dispatcher.domain import ids
from dispatcher.domain.phone import is_e164
from dispatcher.errors import FieldError, ValidationFailed

# `str.isdigit` and `int()` take any Unicode digit (Arabic-Indic, full-width, ...), and `int()`
# also signs and spaces; integers in a URL are ASCII digits and nothing else.
_ASCII_DIGITS = re.compile(r"[0-9]+")


def is_ascii_digits(value: str) -> bool:
    return _ASCII_DIGITS.fullmatch(value) is not None


@dataclass(frozen=True)
class RouteInputs:
    """What one route takes: its query parameters (name -> JSON schema), whether a body, and
    whether it needs an API key."""

    query: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    body: bool = False
    keyed: bool = True


ROUTE_INPUTS = web.RequestKey("route_inputs", RouteInputs)


def declared_inputs(routes: Mapping[tuple[str, str], RouteInputs]) -> Middleware:
    """The middleware holding requests to `routes`, keyed by (METHOD, path template).

    It runs inside the error middleware (the error shape applies). The query string is
    checked at once, before authentication: it costs nothing. A body sent to a route that
    takes none is checked here only on routes without a key; a keyed route checks it after
    its key (`refuse_undeclared_body`), so that nobody without a key can make the service
    parse a megabyte. Both come before the handler changes anything. Requests that match no
    route (404, 405) are left to the router, as before.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        info = request.match_info
        resource = info.route.resource
        if info.http_exception is not None or resource is None:
            return await handler(request)
        method = "GET" if request.method == "HEAD" else request.method
        declared = routes.get((method, resource.canonical), RouteInputs())
        request[ROUTE_INPUTS] = declared
        check_query(request.query, declared.query)
        if not declared.keyed:
            await refuse_undeclared_body(request)
        return await handler(request)

    return middleware


async def refuse_undeclared_body(request: web.Request) -> None:
    """On a route declared without a body, refuse any body but none or `{}`."""
    declared = request.get(ROUTE_INPUTS)
    if declared is not None and not declared.body:
        await read_no_body(request)


def check_query(query: MultiMapping[str], declared: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse unknown and repeated parameters, and integers that are not ASCII digits."""
    errors: list[FieldError] = []
    for name in dict.fromkeys(query):
        values = query.getall(name)
        schema = declared.get(name)
        if schema is None:
            takes = ", ".join(sorted(declared)) or "none"
            errors.append(
                FieldError(f"query.{name}", f"unknown parameter (this endpoint takes: {takes})")
            )
        elif len(values) > 1:
            errors.append(FieldError(f"query.{name}", "must be sent once, not repeated"))
        elif schema.get("type") == "integer":
            low, high = schema.get("minimum"), schema.get("maximum")
            value = values[0]
            if not is_ascii_digits(value) or not (
                (low is None or int(value) >= low) and (high is None or int(value) <= high)
            ):
                errors.append(FieldError(f"query.{name}", integer_message(low, high)))
    if errors:
        raise ValidationFailed(errors)


def integer_message(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"must be an integer from {low} to {high}"
    return "must be an integer (ASCII digits)"


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
