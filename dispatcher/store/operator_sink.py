"""The operator sink (DISPATCHER_OPERATOR_WEBHOOK_URL): a platform team's own endpoint, which
hears every operational event of every workspace, with `workspaceId` added to the data.

It is an ordinary webhook, so its deliveries are signed, retried, recorded, logged and counted
like any other, in an internal workspace of its own (`workspaces.operator`): never listed, no
key, and the source of no operational event (store/operational.py leaves it out). `serve`
brings it in line with its settings at start-up; statements in queries/operator_sink.sql.
"""

from __future__ import annotations

from datetime import datetime

from dispatcher.domain import ids
from dispatcher.domain.events import OPERATIONAL_TYPES
from dispatcher.store import webhooks
from dispatcher.store.database import Database
from dispatcher.store.queries import Queries, Statement


class SQL(Queries, file="operator_sink.sql"):
    lock_sink: Statement
    sink: Statement
    insert_sink_workspace: Statement
    insert_sink_webhook: Statement
    update_sink_webhook: Statement


async def configure(db: Database, url: str | None, secret: str | None, now: datetime) -> None:
    """Make the sink what the settings say: with a URL (and its secret), a live webhook there
    hearing every operational type (made, or pointed there and enabled again: it may have been
    disabled as failing); without one, none (a sink set before is deleted, its pending
    deliveries given up)."""
    events = sorted(OPERATIONAL_TYPES)
    retired: tuple[str, str] | None = None
    async with db.transaction() as conn:
        await conn.execute(*SQL.lock_sink())
        row = await conn.fetchrow(*SQL.sink())
        if url is None or secret is None:
            if row is not None and row["webhook_id"] is not None:
                retired = (row["workspace_id"], row["webhook_id"])
        elif row is None or row["webhook_id"] is None:
            workspace_id = ids.new_id(ids.WORKSPACE) if row is None else row["workspace_id"]
            if row is None:
                await conn.execute(*SQL.insert_sink_workspace(workspace_id=workspace_id))
            await conn.execute(
                *SQL.insert_sink_webhook(
                    id=ids.new_id(ids.WEBHOOK),
                    workspace_id=workspace_id,
                    url=url,
                    events=events,
                    secret=secret,
                    now=now,
                ),
            )
        else:
            await conn.execute(
                *SQL.update_sink_webhook(
                    id=row["webhook_id"], url=url, secret=secret, events=events
                )
            )
    if retired is not None:
        await webhooks.delete(db, retired[0], retired[1], now)
