"""The admin API: tenants (workspaces), their numbers and their keys, from code (docs/admin.md).

Every route takes the admin token (`DISPATCHER_ADMIN_TOKEN`, `ADMIN_TOKEN`) and nothing
else; without the setting these routes are not served at all (404, app.py). The rules are the
CLI's: both doors call the same functions of store/workspaces.py. Bodies are validated before
the workspace in the path is looked up, so a bad body is a 400 wherever it is sent.
"""

from __future__ import annotations

from typing import Annotated, Self

from aiohttp import web
from pydantic import AfterValidator, Field, model_validator
from typing_extensions import TypedDict

from dispatcher.api.framework.context import ADMIN_TOKEN, Services
from dispatcher.api.framework.found import found, not_found
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.routing import Routes
from dispatcher.api.models import E164, Body, documented
from dispatcher.domain import ids
from dispatcher.domain.clock import isoformat, isoformat_or_none
from dispatcher.domain.enums import Scope
from dispatcher.domain.poll import key_limit_problem
from dispatcher.domain.resources import Timestamp
from dispatcher.domain.text import name_pattern, name_problem
from dispatcher.errors import Conflict, FieldError, NotFound, ValidationFailed
from dispatcher.store import workspaces
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import ApiKeyRow, PhoneNumberRow, WorkspaceRow


class Workspace(TypedDict):
    """A tenant: its numbers, keys, webhooks and events are its own (the admin API's)."""

    id: str
    name: str
    createdAt: Timestamp


class PhoneNumber(TypedDict):
    """A number registered to a workspace (E.164); a number belongs to one workspace at most."""

    id: str
    number: str
    workspaceId: str
    createdAt: Timestamp


class ApiKey(TypedDict):
    """A workspace's API key as listed: never its value (only its hash is stored)."""

    id: str
    scopes: list[Scope]
    name: str | None
    createdAt: Timestamp
    revokedAt: Timestamp | None
    webhookId: str | None


class NewApiKey(TypedDict):
    """A key as created: the only answer that carries the key itself; store it now."""

    id: str
    key: str
    scopes: list[Scope]
    name: str | None
    createdAt: Timestamp
    webhookId: str | None


def workspace(row: WorkspaceRow) -> Workspace:
    return {"id": row.id, "name": row.name, "createdAt": isoformat(row.created_at)}


def phone_number(row: PhoneNumberRow) -> PhoneNumber:
    return {
        "id": row.id,
        "number": row.number,
        "workspaceId": row.workspace_id,
        "createdAt": isoformat(row.created_at),
    }


def api_key(row: ApiKeyRow) -> ApiKey:
    return {
        "id": row.id,
        "scopes": [Scope(scope) for scope in row.scopes],
        "name": row.name,
        "createdAt": isoformat(row.created_at),
        "revokedAt": isoformat_or_none(row.revoked_at),
        "webhookId": row.webhook_id,
    }


def new_api_key(row: ApiKeyRow, key: str) -> NewApiKey:
    return {
        "id": row.id,
        "key": key,
        "scopes": [Scope(scope) for scope in row.scopes],
        "name": row.name,
        "createdAt": isoformat(row.created_at),
        "webhookId": row.webhook_id,
    }


MAX_NAME_LENGTH = 255


def _name(value: str) -> str:
    problem = name_problem(value, MAX_NAME_LENGTH)
    if problem is not None:
        raise ValueError(problem)
    return value


def _optional_key_name(value: str | None) -> str | None:
    """Absent, null and `""` leave a key unnamed; any other name follows the name rules."""
    return _name(value) if value else None


def _distinct_scopes(value: list[Scope]) -> list[Scope]:
    if len(set(value)) != len(value):
        raise ValueError("must not repeat a scope")
    return value


class CreateWorkspace(Body):
    name: Annotated[
        str,
        Field(min_length=1, max_length=MAX_NAME_LENGTH),
        AfterValidator(_name),
        documented(name_pattern),
    ]


class AddNumber(Body):
    number: E164


class CreateKey(Body):
    scopes: Annotated[
        list[Annotated[Scope, Field(strict=False)]],
        Field(min_length=1, max_length=len(Scope)),
        AfterValidator(_distinct_scopes),
        documented(uniqueItems=True),
    ]
    name: (
        Annotated[
            str,
            Field(max_length=MAX_NAME_LENGTH),
            AfterValidator(_optional_key_name),
            documented(lambda: name_pattern(may_be_empty=True)),
        ]
        | None
    ) = None
    # The one webhook the key's `webhooks:poll` scope is limited to (docs/admin.md); null:
    # not limited.
    webhookId: Annotated[str, documented(pattern=ids.pattern(ids.WEBHOOK))] | None = None

    @model_validator(mode="after")
    def _limit(self) -> Self:
        problem = key_limit_problem(self.scopes, self.webhookId)
        if problem is not None:
            raise ValidationFailed([FieldError("body.webhookId", problem)])
        return self


routes = Routes()


@routes.post("/v1/admin/workspaces", ADMIN_TOKEN, Workspace, status=201, body=CreateWorkspace)
async def create_workspace(request: web.Request, svc: Services, body: CreateWorkspace) -> Workspace:
    row = await workspaces.insert_workspace(svc.db, body.name)
    return workspace(row)


@routes.list("/v1/admin/workspaces", ADMIN_TOKEN, workspace, cursor="admin.workspaces")
async def list_workspaces(at: Listing, query: PageQuery) -> StorePage[WorkspaceRow]:
    return await workspaces.list_workspaces(at.db, **at.page)


@routes.get("/v1/admin/workspaces/{workspace_id}", ADMIN_TOKEN, Workspace)
async def get_workspace(request: web.Request, svc: Services) -> Workspace:
    row = await workspaces.get_workspace(svc.db, request.match_info["workspace_id"])
    return workspace(found(row, "workspace"))


@routes.post(
    "/v1/admin/workspaces/{workspace_id}/numbers",
    ADMIN_TOKEN,
    PhoneNumber,
    status=201,
    body=AddNumber,
    errors=(409,),
)
async def add_workspace_number(request: web.Request, svc: Services, body: AddNumber) -> PhoneNumber:
    row = await workspaces.insert_number(svc.db, request.match_info["workspace_id"], body.number)
    return phone_number(row)


@routes.list(
    "/v1/admin/workspaces/{workspace_id}/numbers", ADMIN_TOKEN, phone_number, cursor="admin.numbers"
)
async def list_workspace_numbers(at: Listing, query: PageQuery) -> StorePage[PhoneNumberRow]:
    return await workspaces.list_numbers(at.db, at.path["workspace_id"], **at.page)


@routes.post(
    "/v1/admin/workspaces/{workspace_id}/keys", ADMIN_TOKEN, NewApiKey, status=201, body=CreateKey
)
async def create_workspace_key(request: web.Request, svc: Services, body: CreateKey) -> NewApiKey:
    try:
        row, key = await workspaces.insert_key(
            svc.db, request.match_info["workspace_id"], body.scopes, body.name, body.webhookId
        )
    except Conflict as exc:  # not a webhook of this workspace
        raise ValidationFailed([FieldError("body.webhookId", str(exc))]) from None
    return new_api_key(row, key)


@routes.list("/v1/admin/workspaces/{workspace_id}/keys", ADMIN_TOKEN, api_key, cursor="admin.keys")
async def list_workspace_keys(at: Listing, query: PageQuery) -> StorePage[ApiKeyRow]:
    return await workspaces.list_keys(at.db, at.path["workspace_id"], **at.page)


@routes.delete("/v1/admin/workspaces/{workspace_id}/keys/{key_id}", ADMIN_TOKEN, status=204)
async def revoke_workspace_key(request: web.Request, svc: Services) -> None:
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
