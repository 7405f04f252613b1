"""The shapes every route shares, whatever its resource: a list's page and the one error
answer. Each resource's own shapes live with its routes (api/<resource>.py)."""

from __future__ import annotations

from typing import Generic, NotRequired, TypeVar

from typing_extensions import TypedDict

ItemT = TypeVar("ItemT")


class Page(TypedDict, Generic[ItemT]):
    """One page of a list, newest first; `nextCursor` is null on the last page."""

    data: list[ItemT]
    nextCursor: str | None


class ErrorDetail(TypedDict):
    """One field's problem: `path` is `body.<field>`, `query.<name>` or `header.<name>`."""

    path: str
    message: str


class ErrorBody(TypedDict):
    """Every error answer has this shape; `trace` is the answer's `X-Request-Id`."""

    status: int
    code: str
    title: str
    message: str
    errors: NotRequired[list[ErrorDetail]]
    trace: str
