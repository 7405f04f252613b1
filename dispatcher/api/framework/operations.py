"""What each route takes and answers: the record its route table keeps of it.

Each resource module declares its routes in one place each, at the handler, with its route
table (api/framework/routing.py):

    @routes.get("/v1/conversations/{conversation_id}", Scope.CONVERSATIONS_READ, Conversation)

which keeps a `Route`: method, path, credential, and the `Operation` (status, answer, body,
query, headers, errors). The OpenAPI document (framework/openapi.py) and the middleware that
refuses undeclared inputs (framework/query.py) both read these; the operation id is the handler's
name in camelCase. A route that names no answer answers 200 with a body the document does not
describe (the probes, /metrics, the document itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_origin

from pydantic import BaseModel

from dispatcher.api.framework.context import AdminToken, AnyKey, Credential, Public
from dispatcher.api.framework.pagination import PageQuery
from dispatcher.api.framework.query import NoQuery, Query, RouteInputs
from dispatcher.api.framework.shapes import Page
from dispatcher.domain.enums import Scope


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
    query: type[Query] | None = None
    headers: tuple[HeaderParameter, ...] = ()
    errors: tuple[int, ...] = ()
    also: Mapping[int, str] | None = None

    @property
    def paged(self) -> bool:
        """A list: it takes `limit` and `cursor` and answers a page."""
        return get_origin(self.response) is Page


def operation_id(handler: Callable[..., Any]) -> str:
    """`list_messages` -> `listMessages`."""
    first, *rest = handler.__name__.split("_")
    return first + "".join(word.capitalize() for word in rest)


@dataclass(frozen=True)
class Route:
    """A route as declared (api/framework/routing.py): method, path template, credential, operation,
    with its handler (the function the route calls, not the guarded one aiohttp calls)."""

    method: str
    path: str
    credential: Credential
    operation: Operation
    handler: Callable[..., Any]

    @property
    def scope(self) -> Scope | None:
        """The scope the route requires, None for a route without a key or open to any key."""
        return self.credential if isinstance(self.credential, Scope) else None

    @property
    def keyed(self) -> bool:
        """Whether the route needs a workspace key (with a scope or not)."""
        return isinstance(self.credential, Scope | AnyKey)

    @property
    def admin(self) -> bool:
        """Whether the route is the admin API's (the admin token, never a workspace key)."""
        return isinstance(self.credential, AdminToken)

    @property
    def query(self) -> type[Query]:
        """The query parameters the route takes: its model, else a list's `limit` and
        `cursor` alone, else none."""
        if self.operation.query is not None:
            return self.operation.query
        return PageQuery if self.operation.paged else NoQuery

    @property
    def inputs(self) -> RouteInputs:
        """What the strict-input middleware holds requests to this route to."""
        return RouteInputs(
            query=self.query,
            body=self.operation.body is not None,
            keyed=not isinstance(self.credential, Public),
        )
