"""Pull delivery (docs/webhooks.md, "Poll mode"): a webhook's mode, a poll's bounds, and the
iterator a consumer keeps between polls.

A poll webhook has no URL and no deliveries; `GET /v1/webhooks/{id}/poll` reads the events its
filters select, oldest first, as the envelopes a push delivery sends (the event's stored
payload, made by functions.sql `dispatcher_envelope`, the one place an envelope is rendered).

Where a consumer is: a position in the workspace's events ordered by the transaction that
inserted each (`events.txid`) and then by id. A poll returns only events of transactions older
than every transaction of the database still running (functions.sql
`dispatcher_poll_horizon`), so an event whose transaction
commits late (it has an older txid than events already committed) is still ahead of every
iterator handed out: nothing is missed, and since the position only moves forward, nothing is
repeated. The iterator is that position (and `since`, a lower bound on the events' creation
time), as base64url of compact JSON: opaque to clients, checked when it comes back (any other
text is a 400).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

import orjson

from dispatcher.domain import ids
from dispatcher.domain.clock import isoformat, parse_instant
from dispatcher.domain.enums import Scope


class WebhookMode(StrEnum):
    """How a webhook gets its events: POSTed to its URL, or read by its polls."""

    PUSH = "push"
    POLL = "poll"


DEFAULT_LIMIT = 100  # events a poll answers at most, without `limit`
MAX_LIMIT = 1000  # the largest `limit`
# A transaction id is a 64-bit counter (xid8); positions beyond it are no positions.
MAX_TXID = 2**63 - 1


class Position(NamedTuple):
    """Everything up to (txid, event_id), in (txid, id) order, has been read; an event_id of
    "" is before every event of txid. `since`: only events created at or after it (None:
    any)."""

    txid: int
    event_id: str = ""
    since: datetime | None = None

    def after(self, txid: int, event_id: str) -> Position:
        """The position past the event (txid, event_id), the same `since`."""
        return self._replace(txid=txid, event_id=event_id)

    def at_least(self, other: Position) -> Position:
        """The further of the two positions (the same `since`)."""
        if (other.txid, other.event_id) > (self.txid, self.event_id):
            return self._replace(txid=other.txid, event_id=other.event_id)
        return self


def encode_iterator(position: Position) -> str:
    """The iterator a poll answers: its position, opaque (base64url of JSON, no padding)."""
    fields: dict[str, str | int] = {"t": position.txid, "i": position.event_id}
    if position.since is not None:
        fields["s"] = isoformat(position.since)
    return base64.urlsafe_b64encode(orjson.dumps(fields)).rstrip(b"=").decode("ascii")


def decode_iterator(text: str) -> Position | None:
    """The position an iterator names, or None when `text` is not one this service made."""
    if not text or len(text) > 200 or not text.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        fields = orjson.loads(raw)
    except (binascii.Error, ValueError):
        return None
    if not isinstance(fields, dict) or not set(fields) <= {"t", "i", "s"}:
        return None
    txid, event_id, since = fields.get("t"), fields.get("i"), fields.get("s")
    if type(txid) is not int or not 0 <= txid <= MAX_TXID:
        return None
    if not isinstance(event_id, str) or (event_id and not ids.is_id(event_id, ids.EVENT)):
        return None
    moment = None
    if since is not None:
        moment = parse_instant(since) if isinstance(since, str) else None
        if moment is None:
            return None
    return Position(txid, event_id, moment)


def is_iterator(text: str) -> bool:
    return decode_iterator(text) is not None


def key_limit_problem(scopes: Collection[str], webhook_id: str | None) -> str | None:
    """Why a key with `scopes` cannot be limited to `webhook_id` (None: it can): the limit is
    the `webhooks:poll` scope's, so a limited key holds that scope."""
    if webhook_id is None:
        return None
    if not ids.is_id(webhook_id, ids.WEBHOOK):
        return f"must be a webhook id starting with {ids.WEBHOOK}"
    if Scope.WEBHOOKS_POLL not in scopes:
        return f"limits the scope {Scope.WEBHOOKS_POLL}, which the key must hold"
    return None
