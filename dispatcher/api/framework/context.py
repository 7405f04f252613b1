"""Typed application state, the credentials a route may take, and `admit`, the guard every
route runs before its handler (framework/routing.py): a workspace key with a scope (`Scope.X`), any
workspace key (`ANY_KEY`), the admin token (`ADMIN_TOKEN`, docs/admin.md) or none (`PUBLIC`).

The two credentials never stand in for each other: a workspace key on an admin route is 403,
the admin token on a workspace route is 401 (it is no workspace's key).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, final

from aiohttp import web

from dispatcher.api.framework.http import BODY_WAITS, WORKSPACE_ID, single_header
from dispatcher.api.framework.query import refuse_undeclared_body
from dispatcher.domain.clock import Clock
from dispatcher.domain.enums import Scope, allows
from dispatcher.errors import Forbidden, Unauthorized
from dispatcher.settings import Settings
from dispatcher.store import portal, workspaces
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
    # The deployment's instance secret (`instance_secrets`, "cursor"): it keys list cursors,
    # and the Idempotency-Key fingerprints' key is derived from it (api/framework/idempotency.py).
    cursor_key: bytes
    # Valid keys kept in memory while a listener hears of every key change (store/key_cache.py);
    # None looks every key up.
    keys: KeyCache | None = None


SERVICES = web.AppKey("services", Services)


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


async def find_caller(svc: Services, token: str, *, cached: bool = True) -> ApiKey | None:
    """The workspace key, or the portal session's credential (store/portal.py: its row read
    at every request, against the services' clock), that `token` is; None when neither."""
    if portal.is_token(token):
        return await portal.find_token(svc.db, token, svc.clock.now())
    return await workspaces.find_key(svc.db, token, svc.keys if cached else None)


async def authenticate(request: web.Request) -> ApiKey:
    token = bearer_token(request)
    if token is None:
        raise Unauthorized()
    svc = services(request)
    key = await find_caller(svc, token)
    if key is None:
        if is_admin_token(svc.settings, token):
            raise Unauthorized(
                "the admin token opens the admin API (/v1/admin/...) only; send a workspace API key"
            )
        if portal.is_token(token):
            raise Unauthorized("the portal session has ended (expired or deleted)")
        raise Unauthorized("the API key is not valid or has been revoked")
    return key


@contextlib.asynccontextmanager
async def _still_valid(request: web.Request, key: ApiKey) -> AsyncIterator[None]:
    """After a wait for the request's body: the key must still be live, as read from the
    database, not from the key cache (a revocation by another process may not have been heard
    yet). A request whose head arrived before its key was revoked, and its body after the
    revocation answered, is refused and writes nothing. Only slow requests pay this lookup:
    a body that came with its head (most) waited for nothing."""
    yield
    svc = services(request)
    token = bearer_token(request) or ""
    again = await find_caller(svc, token, cached=False)
    if again is None or again.id != key.id:
        raise Unauthorized("the API key has been revoked")


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
    if await find_caller(svc, token) is not None:
        raise Forbidden("a workspace API key cannot use the admin API; send the admin token")
    raise Unauthorized("the admin token is not valid")


@final
class AnyKey:
    """The credential of a route any valid workspace key may call, whatever its scopes: what
    every key may ask, such as what it may do (`GET /v1/me`)."""

    def __repr__(self) -> str:
        return "ANY_KEY"


@final
class AdminToken:
    """The credential of the admin API's routes: the admin token, never a workspace key."""

    def __repr__(self) -> str:
        return "ADMIN_TOKEN"


@final
class Public:
    """No credential: the probes, /metrics, the document, the demo receiver's door."""

    def __repr__(self) -> str:
        return "PUBLIC"


ANY_KEY = AnyKey()
ADMIN_TOKEN = AdminToken()
PUBLIC = Public()
# What a route takes from its caller: a workspace key with this scope, any workspace key, the
# admin token, or nothing.
Credential = Scope | AnyKey | AdminToken | Public


async def admit(request: web.Request, credential: Credential) -> tuple[Any, ...]:
    """Let the caller through `credential`, or refuse; then refuse a body the route does not
    take. Answers what the handler is handed after the request: the services and the key
    (a workspace key), the services (the admin token), nothing (a public route; its body was
    checked by the strict-input middleware already, framework/query.py). A cursor of an admin
    list is bound to the workspace in the path (none for the list of workspaces)."""
    if isinstance(credential, Public):
        return ()
    if isinstance(credential, AdminToken):
        await authenticate_admin(request)
        request[WORKSPACE_ID] = request.match_info.get("workspace_id", "")
        await refuse_undeclared_body(request)
        return (services(request),)
    key = await authenticate(request)
    if isinstance(credential, Scope) and not allows(key.scopes, credential):
        raise Forbidden(f"this API key lacks the scope {credential}")
    request[WORKSPACE_ID] = key.workspace_id
    # Looked up again, from the database, once a body that was still on its way has arrived:
    # first, before the admission slot is taken back (BODY_WAITS are left the last first).
    request.setdefault(BODY_WAITS, []).insert(0, functools.partial(_still_valid, request, key))
    await refuse_undeclared_body(request)
    return (services(request), key)
