"""Publishing operational events (what they are and when they happen:
`dispatcher.domain.operational`). Statements in queries/operational.sql.

They are published in the transaction of what they report (the record of an attempt, the
disabling or enabling of a webhook): an event exists if and only if what it says happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import orjson

from dispatcher import metrics
from dispatcher.domain.operational import Operational, for_operator
from dispatcher.store.database import Connection
from dispatcher.store.queries import Queries, Statement

SOURCE = "service"  # events.source of what the service publishes about itself


class SQL(Queries, file="operational.sql"):
    publish: Statement


async def publish(conn: Connection, events: Sequence[Operational], now: datetime) -> int:
    """Publish `events` in their workspaces' streams, and their copies in the operator sink's
    (when there is one); returns the deliveries made. One statement."""
    if not events:
        return 0
    fanned: int = await conn.fetchval(
        *SQL.publish(
            now=now,
            workspace_ids=[event.workspace_id for event in events],
            types=[event.event_type for event in events],
            data=[orjson.dumps(event.data).decode() for event in events],
            about=[event.about for event in events],
            operator_data=[orjson.dumps(for_operator(event)).decode() for event in events],
        ),
    )
    for event in events:
        metrics.EVENTS_PUBLISHED.labels(SOURCE, event.event_type).inc()
    metrics.FANNED_OUT.inc(fanned)
    return fanned
