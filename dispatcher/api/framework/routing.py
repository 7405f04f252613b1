"""Route tables: each route declared once, at its handler, with everything it is.

    routes = Routes()

    @routes.get("/v1/messages/{message_id}", Scope.MESSAGES_READ, Message)
    async def get_message(request: web.Request, svc: Services, key: ApiKey) -> Message:
        ...

    @routes.post("/v1/messages", Scope.MESSAGES_WRITE, Message, status=202, body=SendMessage)
    async def send_message(
        request: web.Request, svc: Services, key: ApiKey, body: SendMessage
    ) -> Message:
        ...

    @routes.list("/v1/messages", Scope.MESSAGES_READ, message, cursor="messages")
    async def list_messages(at: Listing, query: MessageQuery) -> StorePage[MessageRow]:
        ...

A declaration takes the path; the credential (a scope, `ANY_KEY`, `ADMIN_TOKEN` or `PUBLIC`:
framework/context.py); the type of the answer (a TypedDict of the resource's module; none when
the document does not describe it); then, by keyword, the success `status` (200), the
`body` model (a pydantic model, api/models.py's `Body`), the `query` parameters and `headers`
the handler reads, the `errors` the route adds to those every route can give, and `also`, other
statuses answered in the success's shape (api/framework/operations.py, `Operation`).

One declaration does three things. It registers the route: the table is what
`app.router.add_routes` takes. It guards the route, in this order: the credential (401, then
the scope's 403), the refusal of a body the route does not take (`admit`), then, when the
route names a `body`, the body read and validated (400 naming each field); only then is the
handler called, handed the services and the key (a workspace key's route), the services (the
admin token's) or nothing (a public route), and the parsed body last. And it keeps the route
(`Route`) for the OpenAPI document and the strict-input middleware (api/framework/openapi.py).

The handler returns the answer and the route writes it (JSON, with the declared status; no
content for None; `WithHeaders` adds headers). The handler's parameters and its answer are
checked by mypy against the declaration (the overloads of `Method`): a handler of a route with
a `body` takes that model, the admin token's takes no key, and a route declared with `Message`
returns a Message. A handler whose answer must be known to be writable before its change
commits returns it `Rendered` (the route still writes it, with the declared status). A handler
may write the response itself (an undocumented answer: the probes, /metrics, the document).

A list (`routes.list`) is declared on its store read instead: its filters, its cursor and its
answer are the declaration's; the read only reads (`Routes.list`).

A handler that must look at something else before the body declares its model as
`body_parsed_by_handler` instead (documented and let through as `body` is; publish_event
checks `Idempotency-Key` first and fingerprints the JSON as it came), and parses it itself.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import (
    Any,
    Generic,
    TypeAlias,
    TypedDict,
    TypeVar,
    Union,
    Unpack,
    get_type_hints,
    overload,
)

import orjson
from aiohttp import web
from pydantic import BaseModel

from dispatcher.api.framework.context import AdminToken, AnyKey, Credential, Public, Services, admit
from dispatcher.api.framework.http import json_response, parse_body
from dispatcher.api.framework.operations import HeaderParameter, Operation, Route
from dispatcher.api.framework.pagination import Listing, PageQuery, page_of
from dispatcher.api.framework.query import Query
from dispatcher.api.framework.shapes import Page
from dispatcher.domain.enums import Scope
from dispatcher.store import pages
from dispatcher.store.rows import RowT
from dispatcher.store.workspaces import ApiKey

ModelT = TypeVar("ModelT", bound=BaseModel)
ItemT = TypeVar("ItemT")
AnswerT = TypeVar("AnswerT")
PageQueryT = TypeVar("PageQueryT", bound=PageQuery)


@dataclass(frozen=True)
class WithHeaders(Generic[AnswerT]):
    """An answer with headers of its own (`Idempotent-Replayed: true`)."""

    body: AnswerT
    headers: Mapping[str, str]


@dataclass(frozen=True)
class Rendered(Generic[AnswerT]):
    """An answer rendered already (its JSON), for a handler that must know it can be written
    before its change commits (no 500 after a commit: the webhook's create and update). The
    route writes it with the declared status, as it would have written the answer itself."""

    body: bytes

    @classmethod
    def of(cls, answer: AnswerT) -> Rendered[AnswerT]:
        return cls(orjson.dumps(answer))


# What a handler returns: the answer the route declares (the route writes it, with the
# declared status; None for a route without content), that answer with headers or rendered
# already, or a response it wrote itself (a probe's, /metrics').
Answered: TypeAlias = Union[  # noqa: UP007
    AnswerT, WithHeaders[AnswerT], Rendered[AnswerT], web.StreamResponse
]
Answer: TypeAlias = Awaitable[Answered[AnswerT]]
HandlerT = TypeVar("HandlerT", bound=Callable[..., Awaitable[Any]])
# A handler by the route's credential, and with the body the route parses for it.
KeyHandler = Callable[[web.Request, Services, ApiKey], Answer[AnswerT]]
KeyBodyHandler = Callable[[web.Request, Services, ApiKey, ModelT], Answer[AnswerT]]
AdminHandler = Callable[[web.Request, Services], Answer[AnswerT]]
AdminBodyHandler = Callable[[web.Request, Services, ModelT], Answer[AnswerT]]
PublicHandler = Callable[[web.Request], Answer[AnswerT]]
PublicBodyHandler = Callable[[web.Request, ModelT], Answer[AnswerT]]
# A declaration: it hands the handler back as it was (aiohttp is given the guarded one).
Declare = Callable[[HandlerT], HandlerT]
# A list's store read: its page for the list's bounds, path and workspace, and its query.
ListRead = Callable[[Listing, PageQueryT], Awaitable[pages.Page[RowT]]]
# A check of the resource a list lives under (api/parents.py).
Within = Callable[[Listing], Awaitable[None]]


class Options(TypedDict, total=False):
    """What a route declares by keyword besides its body (`Operation`'s fields)."""

    status: int
    query: type[Query]
    headers: tuple[HeaderParameter, ...]
    errors: tuple[int, ...]
    also: Mapping[int, str]


class Method:
    """`routes.get`, `routes.post`, ...: declare a route of one method (module docstring)."""

    def __init__(self, table: Routes, method: str) -> None:
        self._table = table
        self._method = method

    @overload
    def __call__(
        self, path: str, credential: Scope | AnyKey, response: type[AnswerT], *,
        body: type[ModelT], **options: Unpack[Options],
    ) -> Declare[KeyBodyHandler[ModelT, AnswerT]]: ...  # fmt: skip
    @overload
    def __call__(
        self, path: str, credential: Scope | AnyKey, response: type[AnswerT], *,
        body_parsed_by_handler: type[BaseModel] | None = None, **options: Unpack[Options],
    ) -> Declare[KeyHandler[AnswerT]]: ...  # fmt: skip
    @overload
    def __call__(
        self, path: str, credential: Scope | AnyKey, **options: Unpack[Options]
    ) -> Declare[KeyHandler[None]]: ...
    @overload
    def __call__(
        self, path: str, credential: AdminToken, response: type[AnswerT], *,
        body: type[ModelT], **options: Unpack[Options],
    ) -> Declare[AdminBodyHandler[ModelT, AnswerT]]: ...  # fmt: skip
    @overload
    def __call__(
        self, path: str, credential: AdminToken, response: type[AnswerT],
        **options: Unpack[Options],
    ) -> Declare[AdminHandler[AnswerT]]: ...  # fmt: skip
    @overload
    def __call__(
        self, path: str, credential: AdminToken, **options: Unpack[Options]
    ) -> Declare[AdminHandler[None]]: ...
    @overload
    def __call__(
        self, path: str, credential: Public, response: type[AnswerT], *,
        body: type[ModelT], **options: Unpack[Options],
    ) -> Declare[PublicBodyHandler[ModelT, AnswerT]]: ...  # fmt: skip
    @overload
    def __call__(
        self, path: str, credential: Public, **options: Unpack[Options]
    ) -> Declare[PublicHandler[None]]: ...
    def __call__(
        self,
        path: str,
        credential: Credential,
        response: Any = None,
        *,
        body: type[BaseModel] | None = None,
        body_parsed_by_handler: type[BaseModel] | None = None,
        **options: Unpack[Options],
    ) -> Declare[Any]:
        operation = Operation(response=response, body=body or body_parsed_by_handler, **options)
        return self._table.declare(self._method, path, credential, operation, parses=body)


class Routes:
    """One module's route table: `routes.get(...)`, `.post`, `.patch`, `.delete` declare a
    route each (module docstring); iterated, the table is aiohttp's route definitions."""

    def __init__(self) -> None:
        self.declared: list[Route] = []
        self._definitions: list[web.RouteDef] = []
        self.get = Method(self, "GET")
        self.post = Method(self, "POST")
        self.patch = Method(self, "PATCH")
        self.delete = Method(self, "DELETE")

    def declare(
        self,
        method: str,
        path: str,
        credential: Credential,
        operation: Operation,
        *,
        parses: type[BaseModel] | None,
    ) -> Declare[Any]:
        """Keep the route and register its guarded handler (`parses`: the body model the
        route parses for the handler)."""

        def register(handler: HandlerT) -> HandlerT:
            self.declared.append(Route(method, path, credential, operation, handler))
            guarded = _guarded(credential, parses, operation.status, handler)
            self._definitions.append(web.RouteDef(method, path, guarded, {}))
            return handler

        return register

    @overload
    def list(
        self,
        path: str,
        credential: Scope | AdminToken,
        render: Callable[[RowT], ItemT],
        *,
        cursor: str,
    ) -> Callable[[ListRead[PageQueryT, RowT]], ListRead[PageQueryT, RowT]]: ...
    @overload
    def list(
        self,
        path: str,
        credential: Scope | AdminToken,
        *,
        render_with_services: Callable[[Services, RowT], ItemT],
        cursor: str,
    ) -> Callable[[ListRead[PageQueryT, RowT]], ListRead[PageQueryT, RowT]]: ...
    def list(
        self,
        path: str,
        credential: Scope | AdminToken,
        render: Callable[[Any], Any] | None = None,
        *,
        render_with_services: Callable[[Services, Any], Any] | None = None,
        cursor: str,
    ) -> Callable[[ListRead[Any, Any]], ListRead[Any, Any]]:
        """Declare a list (`GET`): its store read (the function declared), its filters (the
        `PageQuery` model the read takes as `query`), and its answer, a `Page` of what `render` (or
        `render_with_services`, for a rendering that reads a setting) returns, each row
        rendered. The route parses the
        query, reads `limit` and the cursor (bound to the list's name `cursor`, the
        workspace, the path's ids and the filters: api/framework/pagination.py), then calls
        the read and answers the page. The read is named as the operation (`list_messages`:
        `listMessages`). A read whose `at` is a `Listing` annotated with a check
        (`Annotated[Listing, check]`, api/parents.py) has the list's parent checked first (a
        404); a read that needs the parent's row looks it up itself."""

        rendering = render_with_services or _ignoring_services(render)

        def register(read: ListRead[Any, Any]) -> ListRead[Any, Any]:
            hints = get_type_hints(read, include_extras=True)
            query: type[PageQuery] = hints["query"]
            within: Within | None = next(iter(getattr(hints["at"], "__metadata__", ())), None)

            async def answer(request: web.Request, svc: Services, *key: ApiKey) -> Page[Any]:
                parsed = query.parse(request.query)
                item = functools.partial(rendering, svc)
                read_page = functools.partial(_read, read, parsed, within)
                return await page_of(request, svc, cursor, parsed, read_page, item)

            functools.update_wrapper(answer, read)
            item = get_type_hints(rendering, include_extras=True)["return"]
            operation = Operation(response=Page[item], query=query)  # type: ignore[valid-type]
            self.declare("GET", path, credential, operation, parses=None)(answer)
            return read

        return register

    def __iter__(self) -> Iterator[web.RouteDef]:
        return iter(self._definitions)


def _guarded(
    credential: Credential,
    body: type[BaseModel] | None,
    status: int,
    handler: Callable[..., Answer[Any]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """What aiohttp calls: the guard, then the body when the route parses it, then the
    handler, whose answer the route writes with the declared `status`."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        admitted = await admit(request, credential)
        if body is None:
            return _written(await handler(request, *admitted), status)
        return _written(await handler(request, *admitted, await parse_body(request, body)), status)

    return guarded


def _written(answer: Answered[Any], status: int) -> web.StreamResponse:
    """The handler's answer as the response: JSON with the declared status (and its own
    headers), no content for None, or the response the handler wrote itself."""
    if isinstance(answer, web.StreamResponse):
        return answer
    if isinstance(answer, WithHeaders):
        return json_response(answer.body, status=status, headers=dict(answer.headers))
    if isinstance(answer, Rendered):
        return json_response(orjson.Fragment(answer.body), status=status)
    if answer is None:
        return web.Response(status=status)
    return json_response(answer, status=status)


def _ignoring_services(render: Callable[[Any], Any] | None) -> Callable[[Services, Any], Any]:
    if render is None:
        raise TypeError("a list renders its rows: `render` or `render_with_services`")

    def rendering(_svc: Services, row: Any) -> Any:
        return render(row)

    rendering.__annotations__["return"] = get_type_hints(render, include_extras=True)["return"]
    return rendering


async def _read(
    read: ListRead[PageQueryT, RowT], query: PageQueryT, within: Within | None, listing: Listing
) -> pages.Page[RowT]:
    if within is not None:
        await within(listing)
    return await read(listing, query)


def declared_routes(*tables: Routes) -> list[Route]:
    """Every route of `tables`, as declared, in declaration order."""
    return [route for table in tables for route in table.declared]
