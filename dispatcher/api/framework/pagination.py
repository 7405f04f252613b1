"""Opaque, tamper-evident cursors, bound to the list, the workspace and the filters.

A cursor is base64url(MAC || position). The MAC (HMAC-SHA256, shared key in the database)
covers the position and a digest of (list, workspace, filters), so a cursor that was edited,
comes from another list or workspace, or is replayed with other filters is refused with
`invalid_cursor` instead of silently returning the wrong rows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeVar

import orjson
from aiohttp import web
from typing_extensions import TypedDict

from dispatcher.api.framework import shapes
from dispatcher.api.framework.context import Services
from dispatcher.api.framework.http import WORKSPACE_ID
from dispatcher.api.framework.query import ANY_STRING, Query, integer
from dispatcher.errors import InvalidCursor
from dispatcher.store.database import Database
from dispatcher.store.pages import Page, Position
from dispatcher.store.rows import RowT

ItemT = TypeVar("ItemT")
# A list's filters as the request gave them (None: absent), by query parameter.
ListFilters = Mapping[str, Any]

DEFAULT_LIMIT = 25
MAX_LIMIT = 100
_MAC_BYTES = 16
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class PageQuery(Query):
    """Every list's parameters: its page's bounds (the pager reads them); a list's filters
    are the fields of its own model, a subclass of this one."""

    checked_first = frozenset({"limit"})

    limit: Annotated[int, integer(1, MAX_LIMIT, default=DEFAULT_LIMIT)] = DEFAULT_LIMIT
    cursor: Annotated[str | None, ANY_STRING] = None


def _scope_digest(list_name: str, workspace_id: str, filters: ListFilters) -> bytes:
    material = orjson.dumps([list_name, workspace_id, filters], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(material).digest()


def encode_cursor(
    key: bytes, list_name: str, workspace_id: str, filters: ListFilters, position: Position
) -> str:
    moment, row_id = position
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    body = orjson.dumps([micros, row_id])
    mac = hmac.new(key, _scope_digest(list_name, workspace_id, filters) + body, "sha256").digest()
    return base64.urlsafe_b64encode(mac[:_MAC_BYTES] + body).decode().rstrip("=")


def decode_cursor(
    key: bytes, list_name: str, workspace_id: str, filters: ListFilters, cursor: str
) -> Position:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("the cursor is malformed") from exc
    mac, body = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
    expected = hmac.new(key, _scope_digest(list_name, workspace_id, filters) + body, "sha256")
    if len(mac) != _MAC_BYTES or not hmac.compare_digest(mac, expected.digest()[:_MAC_BYTES]):
        raise InvalidCursor(
            "the cursor does not belong to this list with these filters; "
            "start again without a cursor"
        )
    micros, row_id = orjson.loads(body)
    return _EPOCH + timedelta(microseconds=micros), row_id


class Bounds(TypedDict):
    """A page's bounds, as every store list read takes them (`**listing.page`)."""

    limit: int
    after: Position | None


@dataclass(frozen=True)
class Listing:
    """What a list's store read is handed besides its query: the services, the workspace the
    list is bound to (the key's; on an admin route, the one in the path), the path's
    parameters and the page's bounds."""

    svc: Services
    workspace_id: str
    path: Mapping[str, str]
    page: Bounds

    @property
    def db(self) -> Database:
        return self.svc.db


async def page_of(
    request: web.Request,
    svc: Services,
    list_name: str,
    query: PageQuery,
    read: Callable[[Listing], Awaitable[Page[RowT]]],
    item: Callable[[RowT], ItemT],
) -> shapes.Page[ItemT]:
    """One run of a list: the cursor read (bound to the list, the workspace, the path's ids
    and the filters as sent), the page `read` gives for it, each row rendered by `item`, with
    the cursor to the next."""
    workspace_id = request[WORKSPACE_ID]
    # The path's ids by their camelCase names; a workspace in the path binds the cursor as the
    # key's workspace does (api/framework/context.py, `admit`).
    path = {
        _camel(name): value for name, value in request.match_info.items() if name != "workspace_id"
    }
    filters = {**path, **query.sent()}
    after = (
        decode_cursor(svc.cursor_key, list_name, workspace_id, filters, query.cursor)
        if query.cursor
        else None
    )
    listing = Listing(svc, workspace_id, request.match_info, {"limit": query.limit, "after": after})
    page = await read(listing)
    next_cursor = (
        None
        if page.last is None
        else encode_cursor(svc.cursor_key, list_name, workspace_id, filters, page.last)
    )
    return {"data": [item(row) for row in page.rows], "nextCursor": next_cursor}


def _camel(name: str) -> str:
    """`webhook_id` -> `webhookId`."""
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)
