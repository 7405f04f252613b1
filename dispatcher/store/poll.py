"""Pull delivery: a poll webhook's events, page by page (docs/webhooks.md, "Poll mode";
the rules of the position: dispatcher/domain/poll.py). Statements in queries/poll.sql."""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.domain.poll import Position
from dispatcher.store.database import Database
from dispatcher.store.queries import Queries, Statement


class SQL(Queries, file="poll.sql"):
    poll_webhook: Statement
    horizon: Statement
    poll: Statement


@dataclass(frozen=True)
class PollWebhook:
    mode: str  # a WebhookMode
    disabled: bool


@dataclass(frozen=True)
class Polled:
    """A page: the events' envelopes (as stored and pushed), oldest first, where the next
    poll starts, and whether this page took every event there was to take."""

    payloads: list[str]
    position: Position
    done: bool


async def webhook(db: Database, workspace_id: str, webhook_id: str) -> PollWebhook | None:
    """The workspace's webhook (unless deleted): its mode, whether it is disabled."""
    async with db.acquire() as conn:
        row = await conn.fetchrow(
            *SQL.poll_webhook(workspace_id=workspace_id, webhook_id=webhook_id)
        )
    return None if row is None else PollWebhook(row["mode"], row["disabled"])


async def now(db: Database) -> Position:
    """Where a consumer that starts now starts: past every event committed so far."""
    async with db.acquire() as conn:
        horizon: str = await conn.fetchval(*SQL.horizon())
    return Position(int(horizon))


async def page(
    db: Database, workspace_id: str, webhook_id: str, position: Position, limit: int
) -> Polled:
    """The next `limit` events the webhook hears after `position`. A short page (done) moves
    the position up to the horizon: every event of an older transaction has been read."""
    async with db.acquire() as conn:
        rows = await conn.fetch(
            *SQL.poll(
                workspace_id=workspace_id,
                webhook_id=webhook_id,
                txid=str(position.txid),
                event_id=position.event_id,
                since=position.since,
                limit=limit,
            )
        )
    horizon = int(rows[0]["horizon"])
    found = [row for row in rows if row["id"] is not None]
    reached = position
    if found:
        last = found[-1]
        reached = position.after(int(last["txid"]), last["id"])
    done = len(found) < limit
    if done:
        reached = reached.at_least(Position(horizon))
    return Polled([row["payload"] for row in found], reached, done)
