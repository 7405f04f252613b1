"""Typed application state and the decorator that guards every endpoint with a scope."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from dispatcher.api.http import WORKSPACE_ID, single_header
from dispatcher.api.operations import mark_keyed
from dispatcher.api.query import refuse_undeclared_body
from dispatcher.domain.clock import Clock
from dispatcher.domain.enums import Scope, allows
from dispatcher.errors import Forbidden, Unauthorized
from dispatcher.settings import Settings
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from dispatcher.store.key_cache import KeyCache
from dispatcher.store.workspaces import ApiKey

# Every scope a key can hold (the CLI's choices, the demo key's grant): the enumeration's members.
SCOPES: frozenset[Scope] = frozenset(Scope)


@dataclass(frozen=True)
class Services:
    db: Database
    settings: Settings
    clock: Clock
    cursor_key: bytes
    # Valid keys kept in memory while a listener hears of every key change (store/key_cache.py);
    # None looks every key up.
    keys: KeyCache | None = None


SERVICES = web.AppKey("services", Services)

ScopedHandler = Callable[[web.Request, Services, ApiKey], Awaitable[web.StreamResponse]]


def services(request: web.Request) -> Services:
    return request.app[SERVICES]


async def authenticate(request: web.Request) -> ApiKey:
    # Two Authorization headers are refused before any key is looked up: picking one would
    # let a proxy and this service disagree on who is calling.
    header = single_header(request, "Authorization") or ""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized()
    svc = services(request)
    key = await workspaces.find_key(svc.db, token.strip(), svc.keys)
    if key is None:
        raise Unauthorized("the API key is not valid or has been revoked")
    return key


Guard = Callable[[ScopedHandler], Callable[[web.Request], Awaitable[web.StreamResponse]]]


def requires(scope: Scope) -> Guard:
    """Authenticate the caller, check `scope`, and refuse a body the route does not take; the
    handler gets the services and the key. The scope is recorded on the handler, where the
    OpenAPI document and the strict-input middleware read it (api/operations.py)."""
    return _guard(scope)


def requires_key() -> Guard:
    """As `requires`, for a route any valid workspace key may call whatever its scopes: what
    every key may ask, such as what it may do (`GET /v1/me`)."""
    return _guard(None)


def _guard(scope: Scope | None) -> Guard:
    def decorate(handler: ScopedHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        @functools.wraps(handler)
        async def guarded(request: web.Request) -> web.StreamResponse:
            key = await authenticate(request)
            if scope is not None and not allows(key.scopes, scope):
                raise Forbidden(f"this API key lacks the scope {scope}")
            request[WORKSPACE_ID] = key.workspace_id
            await refuse_undeclared_body(request)
            return await handler(request, services(request), key)

        mark_keyed(guarded, scope)
        return guarded

    return decorate
