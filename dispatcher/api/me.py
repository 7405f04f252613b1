"""`GET /v1/me`: what the key a request is made with may do, so that a client (the console
first) shows only the actions the API would take from it."""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web
from typing_extensions import TypedDict

from dispatcher.api.framework.context import ANY_KEY, Services
from dispatcher.api.framework.routing import Routes
from dispatcher.domain.enums import Scope
from dispatcher.store.workspaces import ApiKey


class Me(TypedDict):
    """The key a request is made with: its workspace, its id, and what it may do (its scopes,
    in the order the API documents them)."""

    workspaceId: str
    keyId: str
    scopes: list[Scope]


def me(workspace_id: str, key_id: str, scopes: Collection[str]) -> Me:
    return {
        "workspaceId": workspace_id,
        "keyId": key_id,
        "scopes": [scope for scope in Scope if scope in scopes],
    }


routes = Routes()


@routes.get("/v1/me", ANY_KEY, Me)
async def get_me(request: web.Request, svc: Services, key: ApiKey) -> Me:
    """The key's workspace, id and scopes. Any valid key may ask, whatever its scopes."""
    return me(key.workspace_id, key.id, key.scopes)
