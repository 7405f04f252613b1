"""The engine's statements: claim due deliveries, record attempts in batches, release leases,
and the heartbeat that hands a dead engine's leases back.

The engine works on `delivery_queue` (schema.sql): one narrow row per pending delivery. A
claim sets `lease_owner` and moves `due_at` to 'infinity', so a claimed row leaves the due
walk. A lease holds while its engine beats (`dispatcher_engines`); when an engine stops
beating, any live engine hands its rows back, due at once. A result is recorded only by the
claim that holds the row (`lease_owner` and `attempts` match), so a late result from an engine
whose leases were handed back can never overwrite a newer one. The history (`deliveries`) is
written once per attempt, by the recorder, in the same statement.

What a result means (delivered, retried when, given up, the endpoint's failure clock and its
disabling) is decided in `dispatcher.domain.outcomes`, which declares the result too
(`AttemptResult`); `record` only executes the decisions.

Two per-endpoint controls live in the claim too (docs/delivery.md): a rate limit, a token
bucket per endpoint (`webhook_rates`) that the claim takes from under its row lock; and
ordered delivery, where only the head of each ordering lane (`delivery_lanes`) is claimed, the
other members of the lane are parked out of the due walk, and the record that settles a head
moves its lane on. Both read nothing for endpoints that have neither. The bucket runs at the
endpoint's effective rate: its `rate_limit`, or lower while the receiver's 429s have it
adapted (flow control: store/flow_control.py, which the record calls only for the endpoints a
batch's 429s or adapted endpoints' successes concern).

The claim visits the endpoints that have due work in turn (a round robin over their ids, from a
cursor each engine keeps), so that no endpoint's backlog, however deep, stands in front of
another's work. The statements are in queries/queue.sql, each commented step by step.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from dispatcher.domain import flow_control as flow_rules
from dispatcher.domain import outcomes
from dispatcher.domain.endpoints import OPTIONS, EndpointOptions
from dispatcher.domain.enums import DeliveryStatus, DisabledReason, HeldReason
from dispatcher.domain.health import SettledDelivery
from dispatcher.domain.operational import SettledAttempt, about_attempt
from dispatcher.domain.outcomes import (
    AttemptResult,
    Delivered,
    GivenUp,
    GiveUpReason,
    RetryAt,
)
from dispatcher.domain.signing import signing_secrets
from dispatcher.store import flow_control, operational, stats, webhooks
from dispatcher.store.database import Connection, Database, Record
from dispatcher.store.queries import Queries, Statement


class SQL(Queries, file="queue.sql"):
    index_walks_only: Statement
    claim_settings: Statement
    claim: Statement
    hand_over_settings: Statement
    hand_over: Statement
    trim_serialised: Statement
    record: Statement
    update_failure_clocks: Statement
    lock_webhooks: Statement
    read_failure_clocks: Statement
    advance_lanes: Statement
    release: Statement
    beat: Statement
    take_over_lock_wait: Statement
    take_over: Statement
    forget_engine: Statement
    release_held: Statement
    release_unheld: Statement
    due_summary: Statement
    held_summary: Statement
    any_due: Statement
    watch_due: Statement


# tests/scale/test_hot_path.py EXPLAINs the claim under these names. The claim returns each
# leased delivery's endpoint options with the endpoint's one column list (store/webhooks.py).
INDEX_WALKS_ONLY = SQL.index_walks_only.sql
CLAIM = dataclasses.replace(SQL.claim, sql=webhooks.with_options(SQL.claim.sql, table="w"))
HAND_OVER = dataclasses.replace(
    SQL.hand_over, sql=webhooks.with_options(SQL.hand_over.sql, table="w")
)


class Claimed(NamedTuple):
    """A delivery this engine holds the lease of, with all it needs to send it: its endpoint's
    options as the API stores them (`endpoint`, domain/endpoints.py), and what the claim
    derives from them and from the endpoint's secrets."""

    id: str
    webhook_id: str
    attempts: int
    is_test: bool  # a `webhook.test` delivery (still tried while its webhook is disabled)
    due_at: datetime
    payload: bytes
    event_created_at: datetime
    endpoint: EndpointOptions
    secrets: tuple[str, ...]  # those that sign now (signing.signing_secrets)
    max_concurrency: int  # the endpoint's, or the setting's default when it has none
    event_id: str
    trace_context: str | None  # the publishing span's W3C traceparent (dispatcher.tracing)
    # The webhook's custom headers, secret ones included (name, value): sent with the attempt.
    custom_headers: tuple[tuple[str, str], ...] = ()
    # The values among them that are secret (`secretHeaders`): kept out of the attempt log.
    secret_values: tuple[str, ...] = ()
    in_lane: bool = False  # the head of an ordering lane: its settling moves the lane on
    # The endpoint's rate as the receiver's 429s adapted it (None: not adapted): the claim's
    # bucket granted the row at this rate (domain/flow_control.py).
    adapted_rate: float | None = None


# How many endpoints with due work a claim visits at least (more when it asks for more rows):
# a turn of the ring over E such endpoints takes about E / RING_VISITS claims.
RING_VISITS = 64


class Ring(NamedTuple):
    """Where an engine's round robin over the endpoints with due work stands: its next claim
    visits endpoints after `cursor` (ids in order; "" is the start)."""

    cursor: str = ""


RING_START = Ring()


class Claim(NamedTuple):
    """What a claim leased, and where the engine's ring goes next."""

    rows: list[Claimed]
    ring: Ring  # RING_START when the turn reached the last endpoint with due work


async def claim(
    db: Database,
    *,
    owner: str,
    now: datetime,
    limit: int,
    default_concurrency: int,
    ring: Ring = RING_START,
    finishing: Mapping[str, int] | None = None,
) -> Claim:
    """Lease up to `limit` due deliveries, visiting the endpoints with due work in turn from
    `ring` (docs/delivery.md, "The order of claims"): each endpoint at most its free slots
    (counted across every engine), oldest first.

    `finishing`: per endpoint, how many of this engine's attempts are over but not yet
    recorded (still leased, since the record needs the lease): their slots count as free, so
    that a slot is busy only while its request is, not until the batched record commits.
    """
    done = finishing or {}
    visits = max(limit, RING_VISITS)
    async with db.transaction(SQL.claim_settings.sql) as conn:  # sent with the BEGIN
        rows = await conn.fetch(
            *CLAIM(
                now=now,
                owner=owner,
                limit=limit,
                default_concurrency=default_concurrency,
                done_endpoints=list(done),
                done_counts=list(done.values()),
                cursor=ring.cursor,
                visits=visits,
            ),
        )
        leased = [row for row in rows if row["delivery_id"] is not None]
        serialised = [row for row in leased if row["serialised"]]
        # Rows of fifo endpoints: counted again under their locks (`trim_serialised`), and
        # what exceeds their limits is handed back, unsent. Nothing to do otherwise.
        handed_back: set[str] = set()
        if serialised:
            trimmed = await conn.fetch(
                *SQL.trim_serialised(
                    owner=owner,
                    delivery_ids=[row["delivery_id"] for row in serialised],
                    due_at=[row["due_at"] for row in serialised],
                    done_endpoints=list(done),
                    done_counts=list(done.values()),
                    default_concurrency=default_concurrency,
                ),
            )
            handed_back = {row["delivery_id"] for row in trimmed}
    claimed = [_claimed(row, now) for row in leased if row["delivery_id"] not in handed_back]
    if len(leased) >= limit:
        # Full: the next claim goes on after the endpoint the deal stopped at (those after it
        # got a row fewer this time). Never from it again: when the engine's capacity, not
        # the endpoints' slots, is what is short, an endpoint revisited first would take every
        # slot freed, and the turn would never move on.
        last = max(leased, key=lambda row: (row["deal"], row["ring_pos"]))
        return Claim(claimed, Ring(last["webhook_id"]))
    if rows[0]["visited"] < visits:
        # Every endpoint with queued work from the cursor on was visited: the turn ends.
        return Claim(claimed, RING_START)
    return Claim(claimed, Ring(rows[0]["ring_end"]))


async def hand_over(
    db: Database,
    *,
    owner: str,
    now: datetime,
    done_ids: Sequence[str],
    default_concurrency: int,
    finished: Mapping[str, int] | None = None,
) -> list[Claimed]:
    """The next due deliveries of the endpoints of `done_ids`, one for each: attempts of this
    engine that are over, whose results are not yet recorded (their rows still leased). Their
    slots go on to the new rows at once, instead of being freed for the next claim (the
    statement's comment says why no limit is ever exceeded meanwhile). Plain endpoints only:
    rate-limited and fifo ones, and disabled or deleted ones, hand nothing on. `finished`: per
    endpoint, this engine's other attempts that are over and not yet recorded, those being
    written and those handed on before included (`Recorder.finished`): not in flight."""
    done = finished or {}
    # The claim's settings (a lease that a crash of Postgres loses only hands its row back),
    # and nested loops: the statement's rows are found by key.
    async with db.transaction(SQL.hand_over_settings.sql) as conn:
        rows = await conn.fetch(
            *HAND_OVER(
                owner=owner,
                now=now,
                done_ids=list(done_ids),
                default_concurrency=default_concurrency,
                done_endpoints=list(done),
                done_counts=list(done.values()),
            )
        )
    return [_claimed(row, now) for row in rows]


def _claimed(row: Record, now: datetime) -> Claimed:
    secrets_ = signing_secrets(
        row["secret"], row["previous_secret"], row["previous_secret_expires_at"], now
    )
    endpoint = EndpointOptions._make(row[option] for option in OPTIONS)
    return Claimed(
        id=row["delivery_id"],
        webhook_id=row["webhook_id"],
        attempts=row["attempts"],
        is_test=row["is_test"],
        due_at=row["due_at"],
        payload=row["payload"].encode(),
        event_created_at=row["event_created_at"],
        endpoint=endpoint,
        secrets=tuple(secrets_),
        max_concurrency=row["concurrency"],
        event_id=row["event_id"],
        trace_context=row["trace_context"],
        custom_headers=tuple(row["custom_headers"].items()),
        secret_values=tuple(endpoint.secret_headers.values()),
        in_lane=row["in_lane"],
        adapted_rate=row["adapted_rate"],
    )


class Recorded(NamedTuple):
    """What a batch's record did, for the engine to report."""

    # Results written whose delivery is now failed, with why: their decision's, or
    # `expunged` / `disabled` for a retry given up because its event was expunged or its
    # webhook stopped while it was in flight.
    given_up: list[tuple[AttemptResult, GiveUpReason]]
    disabled: dict[str, DisabledReason]  # webhook id -> why, for those this batch disabled
    # webhook id -> its rate now (None: no longer adapted), for those whose rate this batch
    # adapted (flow control).
    adapted: dict[str, float | None]


async def record(
    db: Database,
    *,
    owner: str,
    results: Sequence[AttemptResult],
    now: datetime,
    disable_after: float,
) -> Recorded:
    """Execute a batch of decisions in one transaction: the deliveries (one statement), the
    endpoints' health rollups (one statement), then each endpoint's failure clock and the
    disabling of endpoints that are gone or failing, as `outcomes` decides from what was
    written (a late result is neither written nor counted).

    Rows several engines share are locked in one order in every engine: the rollups (in key
    order), then webhooks (by id)."""
    if not results:
        return Recorded([], {}, {})
    columns = _record_columns(results)
    async with db.transaction(SQL.index_walks_only.sql) as conn:  # sent with the BEGIN
        rows = await conn.fetch(*SQL.record(**columns, owner=owner))
        failed = {row["id"] for row in rows if row["status"] == DeliveryStatus.FAILED}
        pending = {row["id"] for row in rows if row["status"] == DeliveryStatus.PENDING}
        written = {row["id"]: row for row in rows}
        applied = [r for r in results if r.id in written]
        # Endpoint health: the attempts written and the deliveries they settled.
        settled = [
            SettledDelivery(r.webhook_id, row["created_at"], row["status"])
            for r in applied
            if (row := written[r.id])["status"] != DeliveryStatus.PENDING
        ]
        await stats.record_batch(conn, applied, settled, owner)
        clocks = sorted(outcomes.failure_clocks(applied).items())
        to_disable = outcomes.endpoints_to_disable(applied)
        # Flow control: only endpoints that answered 429, or whose rate is adapted (none in
        # the common case, and then nothing more is sent).
        signals = flow_rules.signals(applied)
        if to_disable.gone or to_disable.maybe_failing or signals:
            # Several statements write webhooks rows below: every row first, in id order.
            ids = {webhook_id for webhook_id, _ in clocks}
            ids.update(to_disable.gone, to_disable.maybe_failing, signals)
            await conn.execute(*SQL.lock_webhooks(ids=sorted(ids)))
        await _update_failure_clocks(conn, clocks)
        disabled = await _disable_endpoints(conn, to_disable, now, timedelta(seconds=disable_after))
        adapted = await flow_control.adapt(conn, signals, now)
        given_up = [(r, _why_given_up(r, written[r.id]["stop"])) for r in applied if r.id in failed]
        await _tell_workspaces(conn, applied, written, {r.id: why for r, why in given_up}, now)
        # Last (lane rows are locked after every other row a record takes; an operational
        # event's deliveries may join lanes too): the lanes whose head this batch settled
        # move on to their next delivery.
        settled_heads = [r.id for r in applied if r.in_lane and r.id not in pending]
        await _advance_lanes(conn, settled_heads, now)
    return Recorded(given_up, disabled, adapted)


def _why_given_up(result: AttemptResult, stop: str | None) -> GiveUpReason:
    """Why a written result's delivery is failed: as decided, or (a retry turned into a
    give-up by the record statement) because of what stopped it while the attempt was in flight."""
    if type(result.decision) is GivenUp:
        return result.decision.why
    return GiveUpReason.EXPUNGED if stop == GiveUpReason.EXPUNGED else GiveUpReason.DISABLED


def _record_columns(results: Sequence[AttemptResult]) -> dict[str, list[Any]]:
    """The record statement's arrays, by name: each decision as the columns that store it,
    and the attempt as the log keeps it."""
    ids: list[str] = []
    statuses: list[str] = []
    codes: list[int | None] = []
    durations: list[int] = []
    errors: list[str | None] = []
    delivered_at: list[datetime | None] = []
    next_attempt_at: list[datetime | None] = []
    attempts_before: list[int] = []
    started: list[datetime] = []
    kinds: list[str] = []
    bodies: list[str | None] = []
    for r in results:
        decision = r.decision
        ids.append(r.id)
        statuses.append(decision.status)
        codes.append(r.response_status)
        durations.append(r.response_ms)
        errors.append(r.last_error)
        delivered_at.append(decision.at if type(decision) is Delivered else None)
        next_attempt_at.append(decision.at if type(decision) is RetryAt else None)
        attempts_before.append(r.attempts_before)
        started.append(r.started_at)
        kinds.append(r.outcome)
        bodies.append(r.response_body)
    return {
        "ids": ids,
        "statuses": statuses,
        "response_statuses": codes,
        "response_ms": durations,
        "last_errors": errors,
        "delivered_at": delivered_at,
        "next_attempt_at": next_attempt_at,
        "attempts_before": attempts_before,
        "started_at": started,
        "outcomes": kinds,
        "response_bodies": bodies,
    }


async def _tell_workspaces(
    conn: Connection,
    applied: Sequence[AttemptResult],
    written: dict[str, Record],
    given_up: dict[str, GiveUpReason],  # by delivery id
    now: datetime,
) -> None:
    """Publish the operational events the settled deliveries give rise to
    (`delivery.exhausted`, `delivery.recovered`), in the record transaction."""
    told = []
    for r in applied:
        row = written[r.id]
        if row["status"] == DeliveryStatus.PENDING:
            continue
        event = about_attempt(
            SettledAttempt(
                delivery_id=r.id,
                workspace_id=row["workspace_id"],
                webhook_id=r.webhook_id,
                event_id=row["event_id"],
                event_type=row["event_type"],
                status=DeliveryStatus(row["status"]),
                attempts=row["attempts"],
                last_error=row["last_error"],
                given_up=given_up.get(r.id),
                failed_before=row["failed_before"],
            )
        )
        if event is not None:
            told.append(event)
    await operational.publish(conn, told, now)


async def _advance_lanes(conn: Connection, settled_heads: Sequence[str], now: datetime) -> None:
    """Give the lanes these settled heads led their next head, due now (functions.sql,
    dispatcher_advance_lanes): one statement, and none when the batch settled no lane's head."""
    if settled_heads:
        await conn.execute(*SQL.advance_lanes(settled_heads=list(settled_heads), now=now))


async def _update_failure_clocks(
    conn: Connection, changes: Sequence[tuple[str, outcomes.ClockChange]]
) -> None:
    """Apply the failure clocks' changes (`outcomes.failure_clocks`, by webhook id: two
    engines updating the same endpoints lock their rows in one order) in one statement."""
    if changes:
        await conn.execute(
            *SQL.update_failure_clocks(
                webhook_ids=[webhook_id for webhook_id, _ in changes],
                resets=[c.reset for _, c in changes],
                failing_since=[c.failing_from for _, c in changes],
            ),
        )


async def _disable_endpoints(
    conn: Connection, to_disable: outcomes.ToDisable, now: datetime, disable_after: timedelta
) -> dict[str, DisabledReason]:
    """Disable the endpoints the batch's give-ups call for (`outcomes.endpoints_to_disable`):
    gone ones at once, failing ones when their failure clock (as just updated, read under
    this transaction) says so."""
    disabled: dict[str, DisabledReason] = {}
    if to_disable.gone:
        for webhook_id in await webhooks.disable(conn, to_disable.gone, DisabledReason.GONE, now):
            disabled[webhook_id] = DisabledReason.GONE
    if to_disable.maybe_failing:
        clocks = await conn.fetch(*SQL.read_failure_clocks(maybe_failing=to_disable.maybe_failing))
        failing = [
            row["id"]
            for row in clocks
            if outcomes.failing_too_long(row["failing_since"], now, disable_after)
        ]
        if failing:
            for webhook_id in await webhooks.disable(conn, failing, DisabledReason.FAILING, now):
                disabled[webhook_id] = DisabledReason.FAILING
    return disabled


async def release(db: Database, *, owner: str, delivery_ids: Sequence[str], now: datetime) -> int:
    """Hand back leases of deliveries this engine will not attempt (shutdown): due at once."""
    if not delivery_ids:
        return 0
    async with db.acquire() as conn:
        result: str = await conn.execute(
            *SQL.release(delivery_ids=list(delivery_ids), owner=owner, now=now)
        )
    return int(result.split()[-1])


async def release_unheld(db: Database, *, owner: str, held: Collection[str], now: datetime) -> int:
    """Hand back this engine's leases of deliveries it does not hold (is not attempting, has
    no result of to write): leases from a claim whose answer was lost. Due at once. Call it
    between claims, never during one (its rows would be handed back as they are taken)."""
    async with db.acquire() as conn:
        result: str = await conn.execute(*SQL.release_unheld(owner=owner, held=list(held), now=now))
    return int(result.split()[-1])


async def beat(db: Database, *, owner: str) -> bool:
    """Say this engine is alive; True when it was not (or no longer) known as alive. One
    short statement on the engine's own row: it never waits for another engine's locks."""
    async with db.acquire() as conn:
        return bool(await conn.fetchval(*SQL.beat(owner=owner)))


class TakeOver(NamedTuple):
    """What a take-over handed back: how many leases, per engine that held them."""

    leases: int
    owners: dict[str, int]


async def take_over(db: Database, *, dead_after: float, now: datetime) -> TakeOver:
    """Forget the engines silent for longer than `dead_after` seconds and hand back their
    leases (and any whose owner is not alive), due at once. Rows and locks held by another
    transaction are skipped, never waited for (a later beat gets them): a stalled engine's
    transaction cannot hold up a live engine's heartbeat."""
    async with db.transaction() as conn:
        await conn.execute(*SQL.take_over_lock_wait())
        rows = await conn.fetch(*SQL.take_over(dead_after=dead_after, now=now))
    owners = dict(sorted(Counter(row["owner"] for row in rows).items()))
    return TakeOver(len(rows), owners)


async def leave(db: Database, *, owner: str, now: datetime) -> int:
    """At the end of a clean stop: forget this engine and hand back whatever it still holds
    (results that could not be written): due at once, sent again with the same id."""
    async with db.transaction() as conn:
        await conn.execute(*SQL.forget_engine(owner=owner))
        result: str = await conn.execute(*SQL.release_held(owner=owner, now=now))
    return int(result.split()[-1])


DUE_COUNT_CAP = 1_000_000


async def due_summary(db: Database, now: datetime) -> tuple[int, float]:
    """(deliveries due now, age in seconds of the oldest due one), through the due index,
    counted up to DUE_COUNT_CAP so that a huge backlog stays cheap to gauge."""
    async with db.acquire() as conn:
        row = await conn.fetchrow(*SQL.due_summary(now=now, cap=DUE_COUNT_CAP))
    assert row is not None
    oldest = row["oldest"]
    return int(row["n"]), 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)


# How many endpoints with queued rows the held-work gauges look at (in id order), at most.
HELD_ENDPOINTS_CAP = 50_000


class Held(NamedTuple):
    """What waits for its endpoint rather than for an engine (the monitor's gauges)."""

    rows: dict[str, int]  # due rows held back, by reason: rate_limit, concurrency, fifo
    oldest_unclaimed: float  # seconds: the oldest due row nothing but an engine holds back


async def held_summary(db: Database, now: datetime, default_concurrency: int) -> Held:
    """What waits for an endpoint's rate limit, concurrency limit or ordering lane, apart
    from what no engine claims (queue.sql, held_summary): one descent per endpoint with
    queued rows, up to HELD_ENDPOINTS_CAP endpoints, and up to DUE_COUNT_CAP rows each."""
    async with db.acquire() as conn:
        found = await conn.fetch(
            *SQL.held_summary(
                now=now,
                endpoints_cap=HELD_ENDPOINTS_CAP,
                default_concurrency=default_concurrency,
                due_cap=DUE_COUNT_CAP,
            )
        )
    rows = {str(reason): 0 for reason in HeldReason}
    oldest_unclaimed = 0.0
    for row in found:
        if row["reason"] is None:
            oldest = row["oldest"]
            if oldest is not None:
                oldest_unclaimed = max((now - oldest).total_seconds(), 0.0)
        else:
            rows[row["reason"]] = int(row["rows"] or 0)
    return Held(rows, oldest_unclaimed)


async def any_due(db: Database, now: datetime) -> bool:
    """A cheap probe (one index entry): is anything due? An idle engine asks it often, so
    that a delivery made due by any door, even the SQL outbox, starts within milliseconds."""
    async with db.acquire() as conn:
        return bool(await conn.fetchval(*SQL.any_due(now=now)))


# How many of the newest due rows the poller's probe counts (its cost with a backlog).
DUE_MARK_CAP = 100


class DueMark(NamedTuple):
    """What the poller saw due at one probe: how many (up to DUE_MARK_CAP), the newest."""

    due: int
    newest: datetime | None

    def announces(self, previous: DueMark | None) -> bool:
        """Whether work became due since `previous`: more rows, or a newer one. Rows claimed
        meanwhile can hide a newcomer from the count but not from the newest; a long
        transaction's commit, due before the newest, from the newest but not from the count
        (below the cap). What both miss waits for an engine's next full claim."""
        if self.due == 0 or self.newest is None:
            return False
        if previous is None or previous.newest is None:
            return True
        return self.due > previous.due or self.newest > previous.newest


async def watch_due(
    conn: Connection,
    seen: DueMark | None,
    *,
    skew: timedelta,
    probe_seconds: float,
    for_seconds: float,
) -> DueMark:
    """The poller's wait, on its own connection (see notifications.Listener.use): probes in
    the database every `probe_seconds`, and answers what is due once it differs from `seen`,
    or after `for_seconds` (one round trip a second while nothing changes). `skew`: how far
    the engine's clock is from the database's (a test's clock)."""
    due, newest = (None, None) if seen is None else seen
    row = await conn.fetchrow(
        *SQL.watch_due(
            due=due,
            newest=newest,
            skew=skew,
            probe_seconds=probe_seconds,
            for_seconds=for_seconds,
            cap=DUE_MARK_CAP,
        ),
        timeout=for_seconds + 5.0,
    )
    assert row is not None
    return DueMark(int(row["due"]), row["newest"])
