"""What each route takes and answers, declared once, on its handler.

A route is declared by three decorators stacked on its handler, each the only place its fact
is written:

    @routes.get("/v1/messages")                      # method and path (aiohttp's route table)
    @requires(Scope.MESSAGES_READ)                   # the scope (api/context.py)
    @operation(200, Page[Message], query=FILTERS)    # inputs and answer (this module)
    async def list_messages(...): ...

The OpenAPI document (api/openapi.py) and the middleware that refuses undeclared inputs
(api/query.py) both read these back from the route tables; the operation id is the handler's
name in camelCase. A handler without `@operation` answers 200 with a body the document does
not describe (the probes, /metrics, the document itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, get_origin

from aiohttp import web
from pydantic import BaseModel

from dispatcher.api.pagination import PAGE_QUERY
from dispatcher.api.query import QueryParameter, RouteInputs
from dispatcher.api.resources import Page
from dispatcher.domain.enums import Scope

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])

# The attribute each decorator leaves on the handler (functools.wraps carries it outwards).
_OPERATION = "operation"
_SCOPE = "scope"
_ADMIN = "admin"
_KEYED = "keyed"


@dataclass(frozen=True)
class HeaderParameter:
    """A request header an operation reads, as the document shows it."""

    name: str
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class Operation:
    """One route's contract beyond its method, path and scope.

    `response` is the TypedDict (or `Page[...]`) the success answer has, None when the body is
    not described; `errors` are the refusals this route adds to those every route can give
    (400, 413, 415; 401, 403, 404 with a key); `also` are other statuses answered with the
    success's shape (the readiness probe's 503).
    """

    status: int = 200
    response: Any = None
    body: type[BaseModel] | None = None
    query: tuple[QueryParameter, ...] = ()
    headers: tuple[HeaderParameter, ...] = ()
    errors: tuple[int, ...] = ()
    also: Mapping[int, str] | None = None

    @property
    def paged(self) -> bool:
        """A list: it takes `limit` and `cursor` and answers a page."""
        return get_origin(self.response) is Page


def operation(
    status: int = 200,
    response: Any = None,
    *,
    body: type[BaseModel] | None = None,
    query: tuple[QueryParameter, ...] = (),
    headers: tuple[HeaderParameter, ...] = (),
    errors: tuple[int, ...] = (),
    also: Mapping[int, str] | None = None,
) -> Callable[[HandlerT], HandlerT]:
    """Declare what the decorated handler takes and answers (see the module docstring)."""
    declared = Operation(status, response, body, query, headers, errors, also)

    def declare(handler: HandlerT) -> HandlerT:
        setattr(handler, _OPERATION, declared)
        return handler

    return declare


def mark_keyed(handler: Callable[..., Any], scope: Scope | None) -> None:
    """Record on a guarded handler that it needs a workspace key, and the scope it requires
    (None: any valid key will do; called by `requires` and `requires_key`)."""
    setattr(handler, _KEYED, True)
    setattr(handler, _SCOPE, scope)


def mark_admin(handler: Callable[..., Any]) -> None:
    """Record on a guarded handler that it takes the admin token (called by `requires_admin`)."""
    setattr(handler, _ADMIN, True)


def declared_operation(handler: Callable[..., Any]) -> Operation:
    found = getattr(handler, _OPERATION, None)
    return found if isinstance(found, Operation) else Operation()


def declared_scope(handler: Callable[..., Any]) -> Scope | None:
    """The scope the route requires, None for a route without a key or open to any key."""
    found = getattr(handler, _SCOPE, None)
    return found if isinstance(found, Scope) else None


def declared_admin(handler: Callable[..., Any]) -> bool:
    """Whether the route is the admin API's (the admin token, never a workspace key)."""
    return getattr(handler, _ADMIN, False) is True


def declared_keyed(handler: Callable[..., Any]) -> bool:
    """Whether the route needs a workspace key (with a scope or not)."""
    return getattr(handler, _KEYED, False) is True


def operation_id(handler: Callable[..., Any]) -> str:
    """`list_messages` -> `listMessages`."""
    first, *rest = handler.__name__.split("_")
    return first + "".join(word.capitalize() for word in rest)


@dataclass(frozen=True)
class Route:
    """A route as declared: method, path template, credential (a workspace key with its scope,
    any workspace key, or the admin token), operation, with its handler. `keyed` without a
    `scope`: any valid key may call it."""

    method: str
    path: str
    scope: Scope | None
    operation: Operation
    handler: Callable[..., Any]
    keyed: bool = False  # a workspace key
    admin: bool = False  # the admin token

    @property
    def query(self) -> tuple[QueryParameter, ...]:
        """Every query parameter the route takes: a list's `limit` and `cursor`, then its own."""
        if self.operation.paged:
            return (*PAGE_QUERY, *self.operation.query)
        return self.operation.query

    @property
    def inputs(self) -> RouteInputs:
        """What the strict-input middleware holds requests to this route to."""
        return RouteInputs(
            query={parameter.name: parameter.schema for parameter in self.query},
            body=self.operation.body is not None,
            keyed=self.keyed or self.admin,
        )


def declared_routes(*tables: web.RouteTableDef) -> list[Route]:
    """Every route of `tables`, with what its decorators declared, in declaration order."""
    return [
        Route(
            method=definition.method.upper(),
            path=definition.path,
            scope=declared_scope(definition.handler),
            operation=declared_operation(definition.handler),
            handler=definition.handler,
            admin=declared_admin(definition.handler),
            keyed=declared_keyed(definition.handler),
        )
        for table in tables
        for definition in table
        if isinstance(definition, web.RouteDef)
    ]
