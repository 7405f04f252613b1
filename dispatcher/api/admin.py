"""The admin API: tenants (workspaces), their numbers and their keys, from code (docs/admin.md).

Every route takes the admin token (`DISPATCHER_ADMIN_TOKEN`, `ADMIN_TOKEN`) and nothing
else; without the setting these routes are not served at all (404, app.py). The rules are the
CLI's: both doors call the same functions of store/workspaces.py. Bodies are validated before
the workspace in the path is looked up, so a bad body is a 400 wherever it is sent.
"""

from __future__ import annotations

from functools import partial

from aiohttp import web

from dispatcher.api.context import ADMIN_TOKEN, Services
from dispatcher.api.found import found, not_found
from dispatcher.api.http import json_response
from dispatcher.api.models import AddNumber, CreateKey, CreateWorkspace
from dispatcher.api.pagination import Pager
from dispatcher.api.resources import (
    ApiKey,
    NewApiKey,
    Page,
    PhoneNumber,
    Workspace,
    api_key,
    new_api_key,
    phone_number,
    workspace,
)
from dispatcher.api.routing import Routes
from dispatcher.errors import NotFound
from dispatcher.store import workspaces

routes = Routes()


@routes.post("/v1/admin/workspaces", ADMIN_TOKEN, Workspace, status=201, body=CreateWorkspace)
async def create_workspace(
    request: web.Request, svc: Services, body: CreateWorkspace
) -> web.Response:
    row = await workspaces.insert_workspace(svc.db, body.name)
    return json_response(workspace(row), status=201)


@routes.get("/v1/admin/workspaces", ADMIN_TOKEN, Page[Workspace])
async def list_workspaces(request: web.Request, svc: Services) -> web.Response:
    pager = Pager(request, svc.cursor_key, "admin.workspaces", {})
    return json_response(await pager.page(partial(workspaces.list_workspaces, svc.db), workspace))


@routes.get("/v1/admin/workspaces/{workspace_id}", ADMIN_TOKEN, Workspace)
async def get_workspace(request: web.Request, svc: Services) -> web.Response:
    row = await workspaces.get_workspace(svc.db, request.match_info["workspace_id"])
    return json_response(workspace(found(row, "workspace")))


@routes.post(
    "/v1/admin/workspaces/{workspace_id}/numbers",
    ADMIN_TOKEN,
    PhoneNumber,
    status=201,
    body=AddNumber,
    errors=(409,),
)
async def add_workspace_number(
    request: web.Request, svc: Services, body: AddNumber
) -> web.Response:
    row = await workspaces.insert_number(svc.db, request.match_info["workspace_id"], body.number)
    return json_response(phone_number(row), status=201)


@routes.get("/v1/admin/workspaces/{workspace_id}/numbers", ADMIN_TOKEN, Page[PhoneNumber])
async def list_workspace_numbers(request: web.Request, svc: Services) -> web.Response:
    pager = Pager(request, svc.cursor_key, "admin.numbers", {})
    read = partial(workspaces.list_numbers, svc.db, request.match_info["workspace_id"])
    return json_response(await pager.page(read, phone_number))


@routes.post(
    "/v1/admin/workspaces/{workspace_id}/keys", ADMIN_TOKEN, NewApiKey, status=201, body=CreateKey
)
async def create_workspace_key(
    request: web.Request, svc: Services, body: CreateKey
) -> web.Response:
    row, key = await workspaces.insert_key(
        svc.db, request.match_info["workspace_id"], body.scopes, body.name
    )
    return json_response(new_api_key(row, key), status=201)


@routes.get("/v1/admin/workspaces/{workspace_id}/keys", ADMIN_TOKEN, Page[ApiKey])
async def list_workspace_keys(request: web.Request, svc: Services) -> web.Response:
    pager = Pager(request, svc.cursor_key, "admin.keys", {})
    read = partial(workspaces.list_keys, svc.db, request.match_info["workspace_id"])
    return json_response(await pager.page(read, api_key))


@routes.delete("/v1/admin/workspaces/{workspace_id}/keys/{key_id}", ADMIN_TOKEN, status=204)
async def revoke_workspace_key(request: web.Request, svc: Services) -> web.Response:
    """Revoked at once in every replica (store/key_cache.py); revoking again is a 204 too."""
    try:
        await workspaces.revoke_key(
            svc.db,
            request.match_info["key_id"],
            svc.keys,
            workspace_id=request.match_info["workspace_id"],
        )
    except NotFound:
        raise not_found("key") from None
    return web.Response(status=204)
