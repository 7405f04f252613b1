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
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

import orjson
from aiohttp import web

from dispatcher.api import resources
from dispatcher.api.http import WORKSPACE_ID
from dispatcher.api.query import QueryParameter, integer_message, is_ascii_digits
from dispatcher.errors import FieldError, InvalidCursor, ValidationFailed
from dispatcher.store.pages import Page, Position
from dispatcher.store.rows import RowT

ItemT = TypeVar("ItemT")
# A list's filters as the request gave them (None: absent), by query parameter.
ListFilters = Mapping[str, str | None]

DEFAULT_LIMIT = 25
MAX_LIMIT = 100
# Every list takes these two, besides its filters (the pager reads and checks them).
PAGE_QUERY = (
    QueryParameter(
        "limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
    ),
    QueryParameter("cursor", {"type": "string"}),
)
_MAC_BYTES = 16
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_limit(request: web.Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return DEFAULT_LIMIT
    if not is_ascii_digits(raw) or not 1 <= int(raw) <= MAX_LIMIT:
        raise ValidationFailed([FieldError("query.limit", integer_message(1, MAX_LIMIT))])
    return int(raw)


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


class PageRead(Protocol[RowT]):
    """A store's list read with everything but the page's bounds already given (a
    `functools.partial` of it): the pager adds `limit` and `after`."""

    def __call__(self, *, limit: int, after: Position | None) -> Awaitable[Page[RowT]]: ...


class Pager:
    """One list run: reads `limit` and `cursor`, then reads the page and answers it with the
    cursor to the next."""

    def __init__(
        self, request: web.Request, key: bytes, list_name: str, filters: ListFilters
    ) -> None:
        self.key = key
        self.list_name = list_name
        self.workspace_id = request[WORKSPACE_ID]
        self.filters = dict(filters)
        self.limit = parse_limit(request)
        cursor = request.query.get("cursor")
        self.after: Position | None = (
            decode_cursor(key, list_name, self.workspace_id, self.filters, cursor)
            if cursor
            else None
        )

    async def page(
        self, read: PageRead[RowT], item: Callable[[RowT], ItemT]
    ) -> resources.Page[ItemT]:
        """The list's answer: the page `read` gives for this run's bounds, each row rendered
        by `item`, with the cursor to the next."""
        page = await read(limit=self.limit, after=self.after)
        next_cursor = (
            None
            if page.last is None
            else encode_cursor(self.key, self.list_name, self.workspace_id, self.filters, page.last)
        )
        return {"data": [item(row) for row in page.rows], "nextCursor": next_cursor}
