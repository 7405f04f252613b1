"""Typed application state, and the decorators that guard every endpoint: `requires` (a
workspace key with a scope) and `requires_admin` (the admin token, docs/admin.md).

The two credentials never stand in for each other: a workspace key on an admin route is 403,
the admin token on a workspace route is 401 (it is no workspace's key).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from dispatcher.api.http import WORKSPACE_ID, single_header
from dispatcher.api.operations import mark_admin, mark_keyed
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
AdminHandler = Callable[[web.Request, Services], Awaitable[web.StreamResponse]]
Guarded = Callable[[web.Request], Awaitable[web.StreamResponse]]


def services(request: web.Request) -> Services:
    return request.app[SERVICES]


def bearer_token(request: web.Request) -> str | None:
    """The token of `Authorization: Bearer <token>`, None without one. Two Authorization
    headers are refused before any token is looked at: picking one would let a proxy and this
    service disagree on who is calling."""
    header = single_header(request, "Authorization") or ""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def is_admin_token(settings: Settings, token: str) -> bool:
    """Whether `token` is the admin token, compared in constant time (digests of equal length,
    so that not even the token's length shows in the timing)."""
    if settings.admin_token is None:
        return False
    offered = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
    expected = hashlib.sha256(settings.admin_token.encode()).digest()
    return hmac.compare_digest(offered, expected)


async def authenticate(request: web.Request) -> ApiKey:
    token = bearer_token(request)
    if token is None:
        raise Unauthorized()
    svc = services(request)
    key = await workspaces.find_key(svc.db, token, svc.keys)
    if key is None:
        if is_admin_token(svc.settings, token):
            raise Unauthorized(
                "the admin token opens the admin API (/v1/admin/...) only; send a workspace API key"
            )
        raise Unauthorized("the API key is not valid or has been revoked")
    return key


async def authenticate_admin(request: web.Request) -> None:
    """Let the admin token through; refuse anything else (a workspace key: 403)."""
    svc = services(request)
    if svc.settings.admin_token is None:
        # The routes are not even served then (app.py); this is the guard's own answer.
        raise web.HTTPNotFound()
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("the admin API takes `Authorization: Bearer <admin token>`")
    if is_admin_token(svc.settings, token):
        return
    if await workspaces.find_key(svc.db, token, svc.keys) is not None:
        raise Forbidden("a workspace API key cannot use the admin API; send the admin token")
    raise Unauthorized("the admin token is not valid")


Guard = Callable[[ScopedHandler], Guarded]


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
    def decorate(handler: ScopedHandler) -> Guarded:
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


def requires_admin(handler: AdminHandler) -> Guarded:
    """Authenticate the admin token and refuse a body the route does not take; the handler
    gets the services. Marked on the handler for the OpenAPI document (tag `admin`) and the
    strict-input middleware, as `requires` marks its scope. A cursor of an admin list is bound
    to the workspace in the path (none for the list of workspaces)."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        await authenticate_admin(request)
        request[WORKSPACE_ID] = request.match_info.get("workspace_id", "")
        await refuse_undeclared_body(request)
        return await handler(request, services(request))

    mark_admin(guarded)
    return guarded
