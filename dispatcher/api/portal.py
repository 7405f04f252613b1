"""Portal sessions (docs/console.md, "Portal sessions"; docs/admin.md): a short-lived link that
opens the console signed in for one workspace, with "read" or "manage" capabilities only.

Made by the admin API (`POST /v1/admin/workspaces/{workspace_id}/portal-sessions`) or by a
workspace key with `webhooks:write` for its own workspace (`POST /v1/portal-sessions`). The
link is `<origin>/console/<session id>#portal=<secret>`: the secret rides in the fragment, which
a browser never sends (no server log, no Referer, no proxy sees it); the session's id in the
path is no secret and tells the console's page which origin may frame it. The console
exchanges the secret, once, for a bearer credential (`POST /v1/portal-sessions/exchange`), then
drops the fragment from its address. A session ends at `expiresAt` or when it is deleted; its
credential is refused (401) at the next request after.
"""

from __future__ import annotations

from typing import Annotated, Literal

from aiohttp import web
from pydantic import AfterValidator, Field
from typing_extensions import TypedDict

from dispatcher.api import admin, console
from dispatcher.api.framework.context import ADMIN_TOKEN, PUBLIC, Services, services
from dispatcher.api.framework.found import not_found
from dispatcher.api.framework.routing import Routes
from dispatcher.api.models import Body, documented
from dispatcher.domain import ids, portal
from dispatcher.domain.clock import isoformat
from dispatcher.domain.enums import Scope
from dispatcher.domain.portal import Capabilities
from dispatcher.domain.resources import Timestamp
from dispatcher.errors import Forbidden, NotFound, Unauthorized
from dispatcher.store import portal as sessions
from dispatcher.store.portal import PortalSession as SessionRow
from dispatcher.store.workspaces import ApiKey


class PortalSession(TypedDict):
    """A portal session as created: `url` carries its one-time secret (in the fragment);
    open it, or hand it to the person who will, now: it is shown this once."""

    id: str
    url: str
    expiresAt: Timestamp


class PortalExchanged(TypedDict):
    """A portal link's secret, exchanged: the bearer credential the console uses until the
    session ends, the session's workspace, capabilities, the scopes they grant, and its end."""

    token: str
    sessionId: str
    workspaceId: str
    capabilities: Capabilities
    scopes: list[Scope]
    expiresAt: Timestamp


def _origin(value: str | None) -> str | None:
    if value is None:
        return None
    problem = portal.origin_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class CreatePortalSession(Body):
    capabilities: Literal["manage", "read"]
    ttl_seconds: Annotated[
        int, Field(ge=portal.MIN_TTL_SECONDS, le=portal.MAX_TTL_SECONDS, alias="ttlSeconds")
    ] = portal.DEFAULT_TTL_SECONDS
    parent_origin: (
        Annotated[
            str,
            Field(max_length=portal.MAX_ORIGIN_LENGTH),
            AfterValidator(_origin),
            documented(portal.ORIGIN_PATTERN),
        ]
        | None
    ) = Field(default=None, alias="parentOrigin")


class ExchangePortalSecret(Body):
    # Any text but a NUL (refused by the body parser, on every string): a secret that is not
    # one (a key, a made-up one) is looked up and refused as unknown (401).
    secret: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")]


def link(request: web.Request, row: SessionRow, secret: str) -> PortalSession:
    """The session as created: its link on DISPATCHER_PUBLIC_URL, or else on the origin the
    request was made to."""
    origin = services(request).settings.public_url or f"{request.scheme}://{request.host}"
    return {
        "id": row.id,
        "url": portal.link(origin, row.id, secret),
        "expiresAt": isoformat(row.expires_at),
    }


async def _create(
    request: web.Request, svc: Services, workspace_id: str, body: CreatePortalSession
) -> PortalSession:
    row, secret = await sessions.create(
        svc.db,
        workspace_id,
        Capabilities(body.capabilities),
        body.ttl_seconds,
        body.parent_origin,
        svc.clock.now(),
    )
    return link(request, row, secret)


def _not_a_session(key: ApiKey) -> None:
    """A portal session never makes, extends or ends portal sessions: its life is its own."""
    if sessions.is_session_key(key):
        raise Forbidden("a portal session cannot manage portal sessions; use a workspace API key")


routes = Routes()


@routes.post(
    "/v1/portal-sessions",
    Scope.WEBHOOKS_WRITE,
    PortalSession,
    status=201,
    body=CreatePortalSession,
)
async def create_portal_session(
    request: web.Request, svc: Services, key: ApiKey, body: CreatePortalSession
) -> PortalSession:
    """A portal session for the key's own workspace."""
    _not_a_session(key)
    return await _create(request, svc, key.workspace_id, body)


@routes.delete("/v1/portal-sessions/{portal_session_id}", Scope.WEBHOOKS_WRITE, status=204)
async def delete_portal_session(request: web.Request, svc: Services, key: ApiKey) -> None:
    """End a portal session of the key's workspace at once: its link and its credential are
    refused from the next request on. Deleting again is a 204 too."""
    _not_a_session(key)
    await _delete(svc, key.workspace_id, request.match_info["portal_session_id"])


@routes.post(
    "/v1/portal-sessions/exchange",
    PUBLIC,
    PortalExchanged,
    body=ExchangePortalSecret,
    errors=(401,),
)
async def exchange_portal_secret(
    request: web.Request, body: ExchangePortalSecret
) -> PortalExchanged:
    """The console's call: a link's secret for the session's credential, once. A secret used
    already, unknown, or of a session that has ended is a 401."""
    svc = services(request)
    exchanged = await sessions.exchange(svc.db, body.secret, svc.clock.now())
    if exchanged is None:
        raise Unauthorized("the portal link is not valid: used already, expired or deleted")
    row, token = exchanged
    return {
        "token": token,
        "sessionId": row.id,
        "workspaceId": row.workspace_id,
        "capabilities": row.capabilities,
        "scopes": [scope for scope in Scope if scope in portal.SCOPES[row.capabilities]],
        "expiresAt": isoformat(row.expires_at),
    }


async def _delete(svc: Services, workspace_id: str, session_id: str) -> None:
    try:
        if not ids.is_id(session_id, ids.PORTAL_SESSION):
            raise NotFound(session_id)
        await sessions.delete(svc.db, workspace_id, session_id, svc.clock.now())
    except NotFound:
        raise not_found("portal session") from None


page_routes = web.RouteTableDef()


@page_routes.get(console.PREFIX + "/{portal_session_id:PS[0-9a-f]{32}}")
async def portal_page(request: web.Request) -> web.Response:
    """The console's page at a session's link (`/console/PS…#portal=<secret>`; added before
    the console's own files, app.py): framed by the session's parent origin only, while it is
    live; by nobody without one, or once it has ended."""
    svc = services(request)
    session_id = request.match_info["portal_session_id"]
    origin = await sessions.framing_origin(svc.db, session_id, svc.clock.now())
    return console.page(console.HEADERS if origin is None else console.framed_by(origin))


# The admin forms join the admin API's table (api/admin.py): served only while the admin token
# is set, documented under its tag.


@admin.routes.post(
    "/v1/admin/workspaces/{workspace_id}/portal-sessions",
    ADMIN_TOKEN,
    PortalSession,
    status=201,
    body=CreatePortalSession,
)
async def create_workspace_portal_session(
    request: web.Request, svc: Services, body: CreatePortalSession
) -> PortalSession:
    """A portal session for workspace `workspace_id` (404 when there is none)."""
    try:
        return await _create(request, svc, request.match_info["workspace_id"], body)
    except NotFound:
        raise not_found("workspace") from None


@admin.routes.delete(
    "/v1/admin/workspaces/{workspace_id}/portal-sessions/{portal_session_id}",
    ADMIN_TOKEN,
    status=204,
)
async def delete_workspace_portal_session(request: web.Request, svc: Services) -> None:
    """End a portal session of workspace `workspace_id` at once; again: 204."""
    await _delete(svc, request.match_info["workspace_id"], request.match_info["portal_session_id"])
