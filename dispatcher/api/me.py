"""`GET /v1/me`: what the key a request is made with may do, so that a client (the console
first) shows only the actions the API would take from it."""

from __future__ import annotations

from aiohttp import web

from dispatcher.api.framework.context import ANY_KEY, Services
from dispatcher.api.framework.routing import Routes
from dispatcher.api.resources import Me, me
from dispatcher.store.workspaces import ApiKey

routes = Routes()


@routes.get("/v1/me", ANY_KEY, Me)
async def get_me(request: web.Request, svc: Services, key: ApiKey) -> Me:
    """The key's workspace, id and scopes. Any valid key may ask, whatever its scopes."""
    return me(key.workspace_id, key.id, key.scopes)
