"""The one answer to a read that found nothing.

A store read answers None (or False) for a resource the workspace does not have, whether it
does not exist or is another workspace's (which of the two is never told). Every route turns
that into the same 404, `<resource> not found`, written here once.
"""

from __future__ import annotations

from typing import TypeVar

from dispatcher.errors import NotFound

T = TypeVar("T")


def not_found(resource: str) -> NotFound:
    """The refusal naming `resource` (`"webhook"`: `webhook not found`)."""
    return NotFound(f"{resource} not found")


def found(value: T | None, resource: str) -> T:
    """`value` as the store read it, or the refusal naming `resource` when it read nothing."""
    if value is None:
        raise not_found(resource)
    return value
