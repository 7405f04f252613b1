"""Resource ids: a type prefix and 32 hex characters of a random UUID.

Opaque, URL-safe, without dots, and not guessable from a neighbour. SQL makes the same shape
with `dispatcher_new_id()` for set-based inserts.
"""

from __future__ import annotations

import re
import uuid

WORKSPACE = "WS"
NUMBER = "PN"
API_KEY = "AK"
MESSAGE = "MS"
CONVERSATION = "CN"
CALL = "AC"
WEBHOOK = "WH"
DELIVERY = "WD"
EVENT = "EV"
PORTAL_SESSION = "PS"

_SHAPE = re.compile(r"[A-Z]{2}[0-9a-f]{32}")


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def pattern(prefix: str) -> str:
    """`is_id` as a JSON Schema pattern (the OpenAPI document's)."""
    return f"^{prefix}[0-9a-f]{{32}}$"


def is_id(value: str, prefix: str) -> bool:
    """True when `value` has the shape of an id of this type (it may still not exist)."""
    return value.startswith(prefix) and _SHAPE.fullmatch(value) is not None
