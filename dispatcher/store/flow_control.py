"""Flow control from the receiver, as the store keeps it (docs/delivery.md, "Flow control";
the rules: domain/flow_control.py): each endpoint's adapted rate lives in its `webhooks` row,
which every engine shares, and is changed in the record transaction, only for the endpoints a
batch concerns (a 429, or a 2xx at an endpoint whose rate is adapted): a batch of endpoints
that never see a 429 sends nothing more. The claim's token bucket (queries/queue.sql) runs at
the adapted rate, read from the `webhooks` row it joins anyway. The statements are in
queries/flow_control.sql.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from dispatcher.domain import flow_control
from dispatcher.domain.flow_control import FlowState, Signal
from dispatcher.store.database import Connection, Database
from dispatcher.store.queries import Queries, Statement


class SQL(Queries, file="flow_control.sql"):
    flow_states: Statement
    set_flow_states: Statement
    adapted_rates: Statement


async def adapt(
    conn: Connection, signals: Mapping[str, Signal], now: datetime
) -> dict[str, float | None]:
    """Apply a recorded batch's signals (`flow_control.signals`) to their endpoints' rates, in
    the record transaction, whose caller has locked those `webhooks` rows (in id order, with
    the others it writes). Two statements, none for an empty `signals`; returns the endpoints
    whose rate changed, with their rate now (None: no longer adapted)."""
    if not signals:
        return {}
    ids = sorted(signals)
    minute = now.replace(second=0, microsecond=0)
    since = minute - timedelta(minutes=flow_control.OBSERVED_MINUTES - 1)
    rows = await conn.fetch(*SQL.flow_states(webhook_ids=ids, since=since))
    changes: dict[str, FlowState] = {}
    for row in rows:
        state = FlowState(
            row["adapted_rate"], row["adapted_ceiling"], row["adapted_at"], row["slowed_at"]
        )
        observed = flow_control.observed_rate(row["recent_attempts"] or 0, since, now)
        after = flow_control.adapt(
            state, signals[row["id"]], rate_limit=row["rate_limit"], observed=observed, now=now
        )
        if after != state:
            changes[row["id"]] = after
    if changes:
        ordered = sorted(changes.items())
        await conn.execute(
            *SQL.set_flow_states(
                webhook_ids=[webhook_id for webhook_id, _ in ordered],
                rates=[s.rate for _, s in ordered],
                ceilings=[s.ceiling for _, s in ordered],
                changed_at=[s.changed_at for _, s in ordered],
                slowed_at=[s.slowed_at for _, s in ordered],
            )
        )
    return {webhook_id: s.rate for webhook_id, s in changes.items()}


async def adapted_rates(db: Database, cap: int) -> dict[str, float]:
    """The endpoints whose rate is adapted now (up to `cap`, in id order), with it."""
    async with db.acquire() as conn:
        rows = await conn.fetch(*SQL.adapted_rates(cap=cap))
    return {row["id"]: float(row["adapted_rate"]) for row in rows}
