"""Query strings, held to each route's declaration like bodies (errors name `query.<name>`).

Every route declares the query parameters it takes, whether it takes a body, and whether it
needs a key (its one declaration, api/routing.py; app.py hands `openapi.route_inputs()` to
`declared_inputs`). A parameter the route does not declare, or one sent twice, is refused
rather than ignored or resolved by picking one of its values, as an unknown body field is. A
declared parameter (`QueryParameter`) carries both its schema, for the document, and its rule,
for the handler that reads it: the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from multidict import MultiMapping

from dispatcher.api.http import Handler, read_no_body
from dispatcher.domain import ids
from dispatcher.domain.clock import parse_instant
from dispatcher.domain.phone import E164_PATTERN, is_e164
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


@dataclass(frozen=True)
class QueryParameter:
    """A query parameter a route takes: its name, the JSON schema the document shows (and
    `check_query` reads for integers), and the rule a value must meet, with the message a
    value that does not is refused with. Without a rule, any value is taken here (the pager
    reads `limit` and `cursor` itself)."""

    name: str
    schema: Mapping[str, Any]
    accepts: Callable[[str], bool] | None = None
    message: str = ""

    def read(self, request: web.Request) -> str | None:
        """The parameter's value, None when absent; a value the rule refuses is a 400."""
        value = request.query.get(self.name)
        if value is not None and self.accepts is not None and not self.accepts(value):
            raise _fail(self.name, self.message)
        return value


def choice(name: str, values: Iterable[str]) -> QueryParameter:
    """A parameter taking one of `values` (an enumeration's members, in its order)."""
    allowed = tuple(str(value) for value in values)
    return QueryParameter(
        name,
        {"type": "string", "enum": list(allowed)},
        frozenset(allowed).__contains__,
        f"must be one of: {', '.join(allowed)}",
    )


def id_parameter(name: str, prefix: str) -> QueryParameter:
    """A parameter taking a resource id of one type (`PN…`); it may not exist."""
    return QueryParameter(
        name,
        {"type": "string", "pattern": ids.pattern(prefix)},
        lambda value: ids.is_id(value, prefix),
        f"must be an id starting with {prefix}",
    )


def e164_parameter(name: str) -> QueryParameter:
    """A parameter taking a phone number in E.164 form (ASCII digits: `\\d` means any Unicode
    digit to some regex engines, so the documented pattern spells them out)."""
    return QueryParameter(
        name,
        {"type": "string", "pattern": f"^{E164_PATTERN}$"},
        is_e164,
        "must be a phone number in E.164 form, like +15555550123",
    )


def instant_parameter(name: str, description: str) -> QueryParameter:
    """A parameter taking an ISO 8601 date-time with its offset (`2026-11-21T10:00:00Z`)."""
    return QueryParameter(
        name,
        {"type": "string", "format": "date-time", "description": description},
        lambda value: parse_instant(value) is not None,
        "must be an ISO 8601 date-time with its offset, like 2026-11-21T10:00:00Z",
    )


def read_instant(request: web.Request, parameter: QueryParameter) -> datetime | None:
    """An `instant_parameter`'s value as a datetime (None when absent)."""
    value = parameter.read(request)
    return None if value is None else parse_instant(value)


def read_time_range(
    request: web.Request, since: QueryParameter, until: QueryParameter
) -> tuple[datetime | None, datetime | None]:
    """A list's `since` (inclusive) and `until` (exclusive); `until` before `since` is a 400."""
    start, end = read_instant(request, since), read_instant(request, until)
    if start is not None and end is not None and end < start:
        raise _fail(until.name, f"must not be before {since.name}")
    return start, end


def read_query(request: web.Request, parameters: Sequence[QueryParameter]) -> dict[str, str | None]:
    """Each parameter's value by name (None when absent), refused as soon as one is not valid."""
    return {parameter.name: parameter.read(request) for parameter in parameters}
