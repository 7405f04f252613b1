"""Pull delivery: a poll webhook's events, page by page (docs/webhooks.md, "Poll mode";
the rules of the position: dispatcher/domain/poll.py). One statement per poll
(queries/poll.sql, functions.sql `dispatcher_poll`): the webhook, the horizon and the page."""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.domain.poll import Position, WebhookMode
from dispatcher.store.database import Database
from dispatcher.store.queries import Queries, Statement


class SQL(Queries, file="poll.sql"):
    poll: Statement


@dataclass(frozen=True)
class Polled:
    """A poll's answer: the webhook's mode and whether it is disabled; for a live poll
    webhook, the events' envelopes (as stored and pushed), oldest first, where the next poll
    starts, and whether this page took every event there was to take."""

    mode: str  # a WebhookMode
    disabled: bool
    payloads: list[str]
    position: Position
    done: bool

    @property
    def pollable(self) -> bool:
        return self.mode == WebhookMode.POLL and not self.disabled


async def page(
    db: Database, workspace_id: str, webhook_id: str, position: Position | None, limit: int
) -> Polled | None:
    """The next `limit` events the webhook hears after `position` (None: a consumer that
    starts now: no events, the position at the horizon). A short page (done) moves the
    position up to the horizon: every event of an older transaction has been read. None when
    the workspace has no such webhook (or it is deleted)."""
    start = position or Position(0)
    async with db.acquire() as conn:
        rows = await conn.fetch(
            *SQL.poll(
                workspace_id=workspace_id,
                webhook_id=webhook_id,
                txid=str(start.txid),
                event_id=start.event_id,
                since=start.since,
                limit=0 if position is None else limit,
            )
        )
    if not rows:
        return None
    first = rows[0]
    horizon = Position(int(first["horizon"]))
    found = [row for row in rows if row["id"] is not None]
    reached = horizon if position is None else position
    if found:
        last = found[-1]
        reached = reached.after(int(last["txid"]), last["id"])
    done = len(found) < limit
    if done:
        reached = reached.at_least(horizon)
    return Polled(
        first["mode"], first["disabled"], [row["payload"] for row in found], reached, done
    )
