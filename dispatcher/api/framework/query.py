"""Query strings, held to each route's declaration like bodies (errors name `query.<name>`).

A route's query parameters are a pydantic model (`Query`): each field a parameter, its type
the rule a value must meet (refused with the message the document states), its
`WithJsonSchema` what the document shows. The one declaration of the route names the model
(api/framework/routing.py); app.py hands `registry.route_inputs()` to `declared_inputs`.

A parameter the model does not have, or one sent twice, is refused rather than ignored or
resolved by picking one of its values, as an unknown body field is: by the strict-input
middleware, before authentication (it costs nothing), with a page's `limit` (`checked_first`).
The other values are validated once the key is known (`Query.parse`), the first parameter at
fault refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Self

from aiohttp import web
from aiohttp.typedefs import Middleware
from multidict import MultiMapping
from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema
from typing_extensions import TypedDict

from dispatcher.api.framework.http import Handler, read_no_body
from dispatcher.domain import ids
from dispatcher.domain.clock import parse_instant
from dispatcher.domain.phone import E164_PATTERN, is_e164
from dispatcher.errors import FieldError, ValidationFailed

# `str.isdigit` and `int()` take any Unicode digit (Arabic-Indic, full-width, ...), and `int()`
# also signs and spaces; integers in a URL are ASCII digits and nothing else.
_ASCII_DIGITS = re.compile(r"[0-9]+")


def is_ascii_digits(value: str) -> bool:
    return _ASCII_DIGITS.fullmatch(value) is not None


def integer_message(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"must be an integer from {low} to {high}"
    return "must be an integer (ASCII digits)"


def _fail(name: str, message: str) -> ValidationFailed:
    return ValidationFailed([FieldError(f"query.{name}", message)])


@dataclass(frozen=True)
class Rule:
    """A parameter's rule, in the parameter's `Annotated` type (`Annotated[str | None,
    id_of(ids.NUMBER)]`): a value `accepts` takes (`convert`ed, a string kept as sent), else
    refused with `message`; the document shows `schema`."""

    accepts: Callable[[str], bool]
    message: str
    schema: Mapping[str, Any]
    convert: Callable[[str], Any] = str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self.validate)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(self.schema)

    def validate(self, value: Any) -> Any:
        if not isinstance(value, str) or not self.accepts(value):
            raise ValueError(self.message)
        return self.convert(value)


class TimeRange(TypedDict):
    """A list's `since` (inclusive) and `until` (exclusive), None when not sent."""

    since: datetime | None
    until: datetime | None


class Query(BaseModel):
    """A route's query parameters: one field each (by its name in the URL), none unknown.

    A value arrives as the string the URL carries; each field's `Rule` says what it must be
    (`choice`, `id_of`, `PHONE_NUMBER`, `instant`, `integer`), and a string is kept as it came: a
    list's cursor is bound to its filters as they were sent (api/framework/pagination.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Parameters checked by the strict-input middleware, before the key (a page's bounds).
    checked_first: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def parameters(cls) -> dict[str, Mapping[str, Any]]:
        """Each parameter's JSON schema, by name, in the model's order (the document's)."""
        return {
            name: next(rule.schema for rule in field.metadata if isinstance(rule, Rule))
            for name, field in cls.model_fields.items()
        }

    @classmethod
    def check(cls, query: MultiMapping[str]) -> None:
        """Refuse unknown and repeated parameters, and those `checked_first` that are not
        valid: every problem of the query string, in its order."""
        takes = cls.model_fields
        errors: list[FieldError] = []
        for name in dict.fromkeys(query):
            values = query.getall(name)
            if name not in takes:
                known = ", ".join(sorted(takes)) or "none"
                errors.append(
                    FieldError(f"query.{name}", f"unknown parameter (this endpoint takes: {known})")
                )
            elif len(values) > 1:
                errors.append(FieldError(f"query.{name}", "must be sent once, not repeated"))
            elif name in cls.checked_first:
                try:
                    cls.model_validate({name: values[0]})
                except ValidationError as exc:
                    errors.append(_first_problem(exc))
        if errors:
            raise ValidationFailed(errors)

    @classmethod
    def parse(cls, query: MultiMapping[str]) -> Self:
        """The request's parameters (already `check`ed: each sent once, none unknown), or a
        400 naming the first one at fault."""
        try:
            return cls.model_validate(dict(query))
        except ValidationError as exc:
            raise ValidationFailed([_first_problem(exc)]) from None

    @model_validator(mode="after")
    def _time_range(self) -> Self:
        """A list's `since` (inclusive) and `until` (exclusive): `until` before `since` is a
        400 (raised as it is: pydantic lets it through)."""
        self.time_range()
        return self

    def time_range(self) -> TimeRange:
        """The `since` and `until` parameters (`instant`s) a model has, as datetimes, as a
        store list read takes them (`**query.time_range()`)."""
        since, until = getattr(self, "since", None), getattr(self, "until", None)
        start = None if since is None else parse_instant(since)
        end = None if until is None else parse_instant(until)
        if start is not None and end is not None and end < start:
            raise _fail("until", "must not be before since")
        return {"since": start, "until": end}

    def sent(self) -> dict[str, Any]:
        """Each parameter as it was sent (None: absent), by name, but a page's bounds."""
        return {name: getattr(self, name) for name in type(self).model_fields if name not in _PAGE}


_PAGE = frozenset({"limit", "cursor"})


class NoQuery(Query):
    """A route that takes no query parameter."""


def _first_problem(exc: ValidationError) -> FieldError:
    error = exc.errors()[0]
    return FieldError(f"query.{error['loc'][0]}", str(error["ctx"]["error"]))


def choice(values: Iterable[str], **facts: Any) -> Rule:
    """A parameter taking one of `values` (an enumeration's members, in its order)."""
    allowed = tuple(str(value) for value in values)
    return Rule(
        frozenset(allowed).__contains__,
        f"must be one of: {', '.join(allowed)}",
        {"type": "string", "enum": list(allowed), **facts},
    )


def id_of(prefix: str) -> Rule:
    """A parameter taking a resource id of one type (`PN…`); it may not exist."""
    return Rule(
        lambda value: ids.is_id(value, prefix),
        f"must be an id starting with {prefix}",
        {"type": "string", "pattern": ids.pattern(prefix)},
    )


# A phone number in E.164 form (ASCII digits: `\\d` means any Unicode digit to some regex
# engines, so the documented pattern spells them out).
PHONE_NUMBER = Rule(
    is_e164,
    "must be a phone number in E.164 form, like +15555550123",
    {"type": "string", "pattern": f"^{E164_PATTERN}$"},
)
# Any string (a cursor: the pager checks it).
ANY_STRING = Rule(lambda value: True, "", {"type": "string"})


def pattern(regex: str, message: str) -> Rule:
    """A parameter matching `regex` whole (documented as `^regex$`)."""
    compiled = re.compile(regex)
    return Rule(
        lambda value: compiled.fullmatch(value) is not None,
        message,
        {"type": "string", "pattern": f"^{regex}$"},
    )


def instant(description: str) -> Rule:
    """A parameter taking an ISO 8601 date-time with its offset (`2026-11-21T10:00:00Z`)."""
    return Rule(
        lambda value: parse_instant(value) is not None,
        "must be an ISO 8601 date-time with its offset, like 2026-11-21T10:00:00Z",
        {"type": "string", "format": "date-time", "description": description},
    )


def integer(low: int, high: int, **facts: Any) -> Rule:
    """A parameter taking an integer from `low` to `high`, in ASCII digits."""
    return Rule(
        lambda value: is_ascii_digits(value) and low <= int(value) <= high,
        integer_message(low, high),
        {"type": "integer", "minimum": low, "maximum": high, **facts},
        int,
    )


@dataclass(frozen=True)
class RouteInputs:
    """What one route takes: its query parameters (a `Query` model), whether a body, and
    whether it needs an API key."""

    query: type[Query] = NoQuery
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
        declared.query.check(request.query)
        if not declared.keyed:
            await refuse_undeclared_body(request)
        return await handler(request)

    return middleware


async def refuse_undeclared_body(request: web.Request) -> None:
    """On a route declared without a body, refuse any body but none or `{}`."""
    declared = request.get(ROUTE_INPUTS)
    if declared is not None and not declared.body:
        await read_no_body(request)
