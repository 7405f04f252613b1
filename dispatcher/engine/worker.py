"""The engine: claim due deliveries, send them with per-endpoint limits, record the results.

One claim loop per process. Attempts run as tasks; each endpoint has at most its
`maxConcurrency` in flight across every engine, so a slow or dead endpoint holds only its own
slots. The loop wakes on NOTIFY (new work from the API, or from the poller), on freed
capacity, and at the latest every DISPATCHER_POLL_INTERVAL. A heartbeat says this engine is
alive and hands back dead engines' leases.

Work no NOTIFY announces (the SQL outbox function, retries coming due, released leases) is
found by ONE poller per database, not one per process (docs/scaling.md, "Idle cost"): the
engine whose listening session holds an advisory lock probes the due index every
POLLER_PROBE_SECONDS and NOTIFYs every engine when work became due since its last probe.
The others only LISTEN, and try the lock once a beat, so the fleet's idle cost does not grow
with its size, and a poller that dies is replaced within a beat. An engine that has just
claimed work stays engaged for a moment: it probes on its own, backing off while its claims
come back empty, so that a rate-limited endpoint's backlog flows at its rate without every
idle engine claiming for rows it cannot take.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime
from functools import partial

import structlog

from dispatcher import metrics, tracing
from dispatcher.domain import outcomes, rate_limits
from dispatcher.domain.clock import Clock, SystemClock
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.domain.retry import RetryPolicy
from dispatcher.engine.oauth import Tokens
from dispatcher.engine.recorder import Recorder
from dispatcher.engine.sender import Outcome, Sender, TooLate
from dispatcher.errors import DispatcherError
from dispatcher.settings import Settings
from dispatcher.store import queue
from dispatcher.store.database import Database
from dispatcher.store.notifications import DELIVERIES_CHANNEL, Listener

log = structlog.get_logger("dispatcher.engine")

# How often the claim loop hands back leases this engine holds without knowing it (a claim that
# committed but whose answer a cut connection lost): at once after a failed claim, and at this
# interval anyway, since a statement can fail in ways the client cannot tell from success.
RECONCILE_SECONDS = 30.0

# After a wake-up caused by finished attempts, wait this long so that one claim picks up
# the slots of many finished attempts instead of one claim per attempt.
COALESCE_SECONDS = 0.002
# How often an engaged engine (one whose claim took work in the last ENGAGED_SECONDS, or one
# without a listener) asks whether anything is due (one index probe); after each claim that
# came back empty it asks half as often, down to ENGAGED_PROBE_MAX_SECONDS (under the rate
# limiter's 30 ms catch-up, so that a limited endpoint's backlog still flows at its rate).
IDLE_PROBE_SECONDS = 0.005
ENGAGED_PROBE_MAX_SECONDS = 0.02
ENGAGED_SECONDS = 1.0

# A finished attempt hands its slot on to its endpoint's next due delivery (queue.hand_over)
# when it waited at least this long past its due time: a sign of a backlog behind it. Below
# that, work arrives as fast as it is sent, and the slot goes back to the claim (a hand-over
# that finds nothing due would cost a statement per delivery for nothing).
HAND_OVER_LAG_SECONDS = 0.02
# ...and while the engine's recent claims (those that took something) took fewer rows than
# this on average: a claim that takes many shares its cost and its wait among them, and the
# slots it fills are busy with as much (work spread over many endpoints); one that takes a
# few is what keeps a slot waiting (work on few endpoints: their slots are the bound).
HAND_OVER_CLAIM_ROWS = 100
RECENT_CLAIM_ROWS = 16

# A rate limit's grant that the engine could not send soon enough after its claim (the engine
# paused, its event loop or a connection slow) is handed back unsent, due again, rather than
# crowd a later second at the receiver (docs/delivery.md, "Rate limits"; how late is too late
# is `rate_limits.grant_grace`). Its time is counted from when the claim was sent plus the
# fastest of the engine's recent claims, so that a distant database's steady round trip
# does not count as lateness.
# How many recent claims the fastest is taken from.
RECENT_CLAIMS = 64

# How often the database's one poller probes the due index: the bound on the delay of work no
# NOTIFY announces (the SQL outbox function, retries coming due), for the whole fleet.
POLLER_PROBE_SECONDS = 0.025
# How long one of the poller's waits in the database lasts at most (a round trip per wait).
POLLER_WAIT_SECONDS = 1.0


class Engine:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        clock: Clock | None = None,
        *,
        owner: str | None = None,
        rand: Callable[[], float] = random.random,
        listen: bool = True,
        exempt_urls: Collection[str] = (),
    ) -> None:
        """`exempt_urls`: URLs the address guard lets through (see `Sender`): `serve`'s own
        demo receiver, and nothing else."""
        self.db = db
        self.settings = settings
        self.clock = clock or SystemClock()
        self.owner = owner or f"engine-{uuid.uuid4().hex[:12]}"
        self.rand = rand
        self.policy = RetryPolicy(settings.retry_schedule)
        self.sender = Sender(
            timeout=settings.request_timeout,
            allowed=settings.allowed_cidrs,
            max_connections=settings.max_in_flight,
            excerpt_bytes=settings.response_excerpt_bytes,
            exempt_urls=exempt_urls,
            proxy=settings.egress_proxy,
        )
        # The access tokens of endpoints with `auth` (engine/oauth.py).
        self.tokens = Tokens(timeout=settings.request_timeout, allowed=settings.allowed_cidrs)
        self.recorder = Recorder(
            db,
            owner=self.owner,
            clock=self.clock,
            disable_after=settings.disable_after,
            max_batch=max(settings.claim_batch_size, 100),
            on_flushed=self.poke,
        )
        self.listener = Listener(db.url, DELIVERIES_CHANNEL, self.poke) if listen else None
        self._tally = metrics.AttemptTally(settings.metrics_per_webhook)
        metrics.WEBHOOK_SERIES.limit = settings.metrics_per_webhook_limit
        self._ring = queue.RING_START  # where this engine's round robin over endpoints stands
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._per_webhook: Counter[str] = Counter()
        self._limits: dict[str, int] = {}
        self._wake = asyncio.Event()
        # Slots handed on (`_hand_on`): finished attempts whose slots wait for the next
        # hand-over statement, and the task that sends them, one statement at a time.
        self._handing: list[tuple[str, str]] = []  # (delivery id, webhook id)
        self._hand_task: asyncio.Task[None] | None = None
        # Held by a hand-over from its statement until its rows are attempts, and by the
        # reconciliation: leases a hand-over has just taken are never judged unheld.
        self._leasing = asyncio.Lock()
        self.slots_handed = 0  # deliveries started by a hand-over (for tests and debugging)
        self._claim_rows: deque[int] = deque(maxlen=RECENT_CLAIM_ROWS)  # of non-empty claims
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        # Held by name: `stop` waits for the claim loop to end before anything else.
        self._claim_loop: asyncio.Task[None] | None = None
        self._db_healthy = True
        self._reconcile_at = 0.0  # loop time; 0: at the first claim, and after a failed one
        self.reconciliations = 0  # how many ran (for tests and debugging)
        self.poller_probe = POLLER_PROBE_SECONDS
        # How often an engine that is not the poller tries to become it: once a beat.
        self.lead_retry = min(1.0, settings.heartbeat_timeout / 3)
        self.beat_interval = min(1.0, settings.heartbeat_timeout / 3)
        self.beats = 0  # beats that got through (for tests and debugging)
        self._engaged_until = 0.0  # loop time: probe on our own until then
        self._empty_claims = 0  # claims in a row that took nothing (the engaged backoff)
        self._claim_seconds: deque[float] = deque(maxlen=RECENT_CLAIMS)  # their round trips
        self.grants_expired = 0  # rate-limit grants handed back unsent (for tests, debugging)
        # For tests: awaited by each attempt between its claim and its send (a pause there).
        self.before_send: Callable[[queue.Claimed], Awaitable[None]] | None = None
        self.running = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.sender.start()
        await self.tokens.start()
        # Known as alive before the first claim, so no live engine takes its leases back.
        await queue.beat(self.db, owner=self.owner)
        # Dead engines' leases are handed back at once (logged as every take-over is), not a
        # beat later; a failure here is the heartbeat's to retry.
        with contextlib.suppress(DispatcherError):
            await self._take_over()
        self._claim_loop = asyncio.create_task(self._loop(), name="engine-claim-loop")
        self._tasks = [
            asyncio.create_task(self.recorder.run(), name="engine-recorder"),
            self._claim_loop,
            asyncio.create_task(self._heartbeat(), name="engine-heartbeat"),
        ]
        if self.listener is not None:
            self._tasks.append(asyncio.create_task(self.listener.run(), name="engine-listener"))
            self._tasks.append(asyncio.create_task(self._poll(), name="engine-poller"))
        self.running = True
        metrics.ENGINE_RUNNING.set(1)
        # Computed when scraped, not on every attempt (the hot path stays free of them).
        metrics.IN_FLIGHT.set_function(lambda: len(self._in_flight))
        metrics.AT_LIMIT.set_function(self._webhooks_at_limit)
        log.info("engine.started", owner=self.owner)

    async def stop(self) -> None:
        """Stop claiming; let attempts in flight finish until the deadline; release the rest;
        write every result; close."""
        if self._stopping:
            return
        self._stopping = True
        self.poke()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.shutdown_timeout
        if self._claim_loop is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._claim_loop
        if self._hand_task is not None:  # it starts nothing once stopping
            with contextlib.suppress(asyncio.CancelledError):
                await self._hand_task
        attempts = list(self._in_flight.values())
        if attempts:
            await asyncio.wait(attempts, timeout=max(deadline - loop.time(), 0))
        unfinished = [d for d, task in self._in_flight.items() if not task.done()]
        for delivery_id in unfinished:
            self._in_flight[delivery_id].cancel()
        for task in list(self._in_flight.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Results get as long again to be written (at least a second): when Postgres is away
        # the shutdown stays bounded, and what cannot be written is logged as lost.
        lost = await self.recorder.flush_all(
            deadline=loop.time() + max(self.settings.shutdown_timeout, 1.0)
        )
        if unfinished:
            try:
                released = await queue.release(
                    self.db, owner=self.owner, delivery_ids=unfinished, now=self.clock.now()
                )
                log.info("engine.released", count=released)
            except DispatcherError as exc:  # handed back by a live engine once we stop beating
                log.warning("engine.release_failed", count=len(unfinished),
                            delivery_ids=unfinished, error=str(exc))  # fmt: skip
        for task in self._tasks:
            task.cancel()
        # A task that died has been reported by the supervisor: its error must not stop this.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            # No longer alive: whatever this engine still holds (results it could not write)
            # is due again now rather than after the heartbeat timeout.
            handed_back = await queue.leave(self.db, owner=self.owner, now=self.clock.now())
            if handed_back:
                log.warning("engine.handed_back", count=handed_back)
        except DispatcherError as exc:
            log.warning("engine.leave_failed", error=str(exc))
        await self.sender.close()
        await self.tokens.close()
        self._tally.flush()
        self.running = False
        metrics.ENGINE_RUNNING.set(0)
        log.info("engine.stopped", owner=self.owner, unfinished=len(unfinished), lost=lost)

    def poke(self) -> None:
        """Wake the claim loop (new work, or capacity came back)."""
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def polling(self) -> bool:
        """Whether this engine is the database's poller now."""
        return self.listener is not None and self.listener.leading

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The engine's long-running tasks, for the process's supervisor: each runs until
        `stop`; one that ends sooner is a fault (dispatcher/supervision.py)."""
        return list(self._tasks)

    # -- claiming ----------------------------------------------------------------------

    async def _loop(self) -> None:
        backoff = 0.2
        while not self._stopping:
            self._wake.clear()
            try:
                await self._reconcile()
                claimed, asked = await self.claim_once()
            except Exception as exc:  # the loop must outlive any single failure
                self._reconcile_at = 0.0  # the claim may have committed: see RECONCILE_SECONDS
                if self._db_healthy:
                    if isinstance(exc, DispatcherError):
                        log.warning("engine.database_unavailable", error=str(exc))
                    else:
                        log.exception("engine.claim_failed")
                self._db_healthy = False
                await self._woken(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            if not self._db_healthy:
                log.info("engine.database_recovered")
            self._db_healthy = True
            backoff = 0.2
            if asked and claimed >= asked:
                await asyncio.sleep(0)  # a full batch: more may be due; claim again at once
                continue
            await self._idle_wait()
            if not self._stopping:
                await asyncio.sleep(COALESCE_SECONDS)

    async def _reconcile(self) -> None:
        """When due, hand back the leases this engine holds but is neither attempting nor
        recording: without it, rows leased by a claim whose answer was lost stay leased (and
        hold their endpoint's slots) for as long as this engine beats."""
        now = asyncio.get_running_loop().time()
        if now < self._reconcile_at:
            return
        async with self._leasing:
            held = {*self._in_flight, *self.recorder.holding()}
            released = await queue.release_unheld(
                self.db, owner=self.owner, held=held, now=self.clock.now()
            )
        self._reconcile_at = now + RECONCILE_SECONDS
        self.reconciliations += 1
        if released:
            log.warning("engine.leases_reclaimed", count=released)

    async def _idle_wait(self) -> None:
        """Until woken (NOTIFY, freed capacity) or the poll interval ends; an engaged engine
        (or one without a listener) also probes the queue and claims when something is due."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.poll_interval
        while not self._stopping:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if self.listener is not None and loop.time() >= self._engaged_until:
                # Idle: only a wake-up (the poller's included) or the poll interval ends it.
                await self._woken(remaining)
                return
            backoff = min(IDLE_PROBE_SECONDS * 2**self._empty_claims, ENGAGED_PROBE_MAX_SECONDS)
            if await self._woken(min(backoff, remaining)):
                return
            if len(self._in_flight) >= self.settings.max_in_flight:
                continue  # no room: a finished attempt will wake the loop
            try:
                if await queue.any_due(self.db, self.clock.now()):
                    return
            except DispatcherError:
                return  # the claim reports and backs off

    async def _poll(self) -> None:
        """Be the database's one poller when no other engine is: take the advisory lock on
        the listening session (tried once a beat); while holding it, probe the due index
        every `poller_probe` seconds and wake every engine when work became due since the
        last probe (`DueMark.announces`): not again for a backlog nobody can claim now. The
        probes run in the database (`queue.watch_due`): one round trip a second while nothing
        changes."""
        assert self.listener is not None
        listener = self.listener
        previous: queue.DueMark | None = None
        while True:
            if not listener.leading:
                previous = None
                try:
                    if await listener.try_lead():
                        log.info("engine.polling", owner=self.owner)
                        continue
                except DispatcherError as exc:
                    log.debug("engine.poller_lock_failed", error=str(exc))
                await asyncio.sleep(self.lead_retry)
                continue
            try:
                watch = partial(
                    queue.watch_due, seen=previous, skew=self.clock.now() - datetime.now(UTC),
                    probe_seconds=self.poller_probe, for_seconds=POLLER_WAIT_SECONDS,
                )  # fmt: skip
                mark = await listener.use(watch)
                if mark.announces(previous):
                    await listener.announce()
                previous = mark
            except DispatcherError as exc:  # the listener reconnects; the lock is lost then
                log.debug("engine.poller_probe_failed", error=str(exc))
                await asyncio.sleep(self.poller_probe)

    async def _woken(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    async def _heartbeat(self) -> None:
        """Beat every second or so; after each beat, hand back the leases of engines that
        stopped beating (any live engine does it: no leader).

        The beat is its own short statement on this engine's own row, bounded in time, and the
        take-over comes after it, skipping whatever another transaction holds: so a stalled
        engine (paused, or cut off from Postgres inside a transaction, its locks held until
        Postgres ends its session) can never stop a live engine from beating, and the live
        one is never taken for dead when the stall ends."""
        interval = self.beat_interval
        while True:
            await asyncio.sleep(interval)
            try:
                async with asyncio.timeout(interval):
                    registered = await queue.beat(self.db, owner=self.owner)
            except (DispatcherError, TimeoutError) as exc:
                log.debug("engine.heartbeat_failed", error=str(exc) or type(exc).__name__)
                continue
            self.beats += 1
            if registered:
                # Silent too long (a stall, an outage): its leases were handed back and may be
                # sent again by others. Results still to come are fenced off by the record.
                log.warning("engine.heartbeat_resumed", owner=self.owner)
            with contextlib.suppress(DispatcherError, TimeoutError):
                async with asyncio.timeout(interval):
                    await self._take_over()

    async def _take_over(self) -> None:
        """Hand back the leases of engines that stopped beating (and any without a live
        owner); log what was taken over, and from whom."""
        try:
            taken = await queue.take_over(
                self.db, dead_after=self.settings.heartbeat_timeout, now=self.clock.now()
            )
        except DispatcherError as exc:
            log.debug("engine.take_over_failed", error=str(exc))
            raise
        if taken.leases:
            log.info("engine.took_over", count=taken.leases, owners=taken.owners)
            self.poke()

    async def claim_once(self) -> tuple[int, int]:
        """Claim what fits in the free capacity and start the attempts; (claimed, asked)."""
        self._tally.flush()
        free = self.settings.max_in_flight - len(self._in_flight)
        asked = min(self.settings.claim_batch_size, free)
        if asked <= 0:
            return 0, 0
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        rows: list[tuple[queue.Claimed, float]] = []  # each with when it was granted
        for _ in range(2):  # a turn of the ring that ends short goes on from its start
            from_start = self._ring == queue.RING_START
            sent = loop.time()
            claim = await queue.claim(
                self.db,
                owner=self.owner,
                now=self.clock.now(),
                limit=asked - len(rows),
                default_concurrency=self.settings.max_concurrency_per_webhook,
                ring=self._ring,
                finishing=self.recorder.finishing(),
            )
            self._claim_seconds.append(loop.time() - sent)
            granted = sent + min(self._claim_seconds)  # when a grant may have come, at the latest
            rows += [(row, granted) for row in claim.rows]
            self._ring = claim.ring
            if from_start or self._ring != queue.RING_START or len(rows) >= asked:
                break
        took = time.perf_counter() - started
        if rows:
            self._engaged_until = asyncio.get_running_loop().time() + ENGAGED_SECONDS
            self._empty_claims = 0
            self._claim_rows.append(len(rows))
        else:
            self._empty_claims = min(self._empty_claims + 1, 8)
        metrics.CLAIM_DURATION.observe(took)
        metrics.CLAIM_BATCH.observe(len(rows))
        metrics.ENGINE_LAST_CLAIM.set(time.time())
        # The claim's span (tracing on, something claimed) is its attempts' parent.
        parent = tracing.claimed(took, len(rows), asked) if tracing.ENABLED and rows else None
        for row, granted in rows:
            send_by = None
            # The rate that granted the row at the claim: adapted by flow control, or its own.
            rate = row.endpoint.rate_limit if row.adapted_rate is None else row.adapted_rate
            if rate is not None:
                send_by = granted + rate_limits.grant_grace(math.ceil(rate))
            self._start_attempt(row, parent, send_by)
        return len(rows), asked

    def _start_attempt(
        self,
        claimed: queue.Claimed,
        parent: tracing.Context | None = None,
        send_by: float | None = None,
    ) -> None:
        self._per_webhook[claimed.webhook_id] += 1
        self._limits[claimed.webhook_id] = claimed.max_concurrency
        # Named after its delivery, so a task dump taken in a hang or a leak says which one.
        task = asyncio.create_task(
            self._attempt(claimed, parent, send_by), name=f"engine-attempt {claimed.id}"
        )
        self._in_flight[claimed.id] = task

    def _webhooks_at_limit(self) -> int:
        # Read by a scrape, off the event loop (api/metrics.py): copied first, in one step
        # the loop cannot interleave with, never iterated while the loop may change it.
        busy = list(self._per_webhook.items())
        return sum(1 for w, n in busy if n >= self._limits.get(w, 1))

    # -- one attempt ---------------------------------------------------------------------

    async def _attempt(
        self,
        claimed: queue.Claimed,
        parent: tracing.Context | None = None,
        send_by: float | None = None,
    ) -> None:
        """One attempt, always recorded: nothing raised while sending escapes this task (it
        would leave the delivery leased, unrecorded, and claimed again forever). A rate
        limit's grant that cannot be sent by `send_by` (loop time) is no attempt: its lease
        is handed back, the delivery due again (`_hand_back_grant`)."""
        started = time.perf_counter()
        handed = False  # the slot went on to the endpoint's next delivery (`_hand_on`)
        try:
            if self.before_send is not None:
                await self.before_send(claimed)
            started_at = self.clock.now()
            lag = (started_at - claimed.due_at).total_seconds()
            span = (
                tracing.attempt_started(
                    parent,
                    url=claimed.endpoint.url or "",
                    delivery_id=claimed.id,
                    webhook_id=claimed.webhook_id,
                    event_id=claimed.event_id,
                    attempt=claimed.attempts + 1,
                    trace_context=claimed.trace_context,
                )
                if tracing.ENABLED
                else None
            )
            auth = claimed.endpoint.auth
            send = (
                self.sender.send
                if auth is None  # with auth: a bearer token first (engine/oauth.py)
                else partial(self.tokens.send, self.sender, claimed.webhook_id, auth)
            )
            try:
                outcome = await send(
                    # A poll webhook (no url) has no deliveries; "" would fail as no URL.
                    claimed.endpoint.url or "",
                    claimed.id,
                    claimed.secrets,
                    claimed.payload,
                    claimed.custom_headers,
                    claimed.secret_values,
                    send_by,
                    claimed.endpoint.timeout_seconds,
                    claimed.webhook_id,
                    claimed.endpoint.tls,
                )
            except TooLate:
                assert send_by is not None
                late = asyncio.get_running_loop().time() - send_by
                await self._hand_back_grant(claimed, late)
                if span is not None:
                    tracing.attempt_ended(span, "not_sent", None, "rate limit grant expired")
                return
            except Exception:
                log.exception("engine.attempt_fault", delivery_id=claimed.id)
                elapsed = int((time.perf_counter() - started) * 1000)
                outcome = Outcome(
                    AttemptOutcome.CONNECTION_ERROR,
                    None,
                    elapsed,
                    "connection error: the request could not be completed",
                )
            result = self._result(claimed, outcome, started_at)
            self.recorder.add(result)
            handed = self._hand_on(claimed, lag)
            with contextlib.suppress(Exception):  # metrics must never cost a record
                self._observe(claimed, outcome, lag, result.finished_at)
            if span is not None:  # (tracing hooks never raise)
                tracing.attempt_ended(span, outcome.kind, outcome.status, outcome.error)
        finally:
            self._in_flight.pop(claimed.id, None)
            self._per_webhook[claimed.webhook_id] -= 1
            if self._per_webhook[claimed.webhook_id] <= 0:
                del self._per_webhook[claimed.webhook_id]
                self._limits.pop(claimed.webhook_id, None)
            if not handed:  # the slot is free for the next claim
                self.poke()

    # -- slots handed on -----------------------------------------------------------------

    def _hand_on(self, claimed: queue.Claimed, lag: float) -> bool:
        """Hand the slot of a finished attempt (its result just buffered) on to its endpoint's
        next due delivery, without waiting for a claim: with a backlog on few endpoints, a
        slot otherwise waits for the claim in progress to end and the next to come back, and
        that wait, not the receiver, bounds an endpoint's rate. Only for a plain endpoint (no
        rate limit: its bucket is the claim's; not a lane), for an attempt that waited past
        its due time (HAND_OVER_LAG_SECONDS), while the engine's claims take few rows each
        (HAND_OVER_CLAIM_ROWS: work on few endpoints), and while the engine has room to
        spare: the claim's round robin over endpoints is what shares a full engine fairly.
        Whether it did: the slot is then not the claim's to count free (`Recorder.hand`)."""
        if (
            self._stopping
            or lag < HAND_OVER_LAG_SECONDS
            or claimed.endpoint.rate_limit is not None
            or claimed.adapted_rate is not None
            or claimed.in_lane
            or len(self._in_flight) > self.settings.max_in_flight // 2
            or sum(self._claim_rows) >= HAND_OVER_CLAIM_ROWS * len(self._claim_rows)
        ):
            return False
        self._handing.append((claimed.id, claimed.webhook_id))
        self.recorder.hand(claimed.id)
        if self._hand_task is None or self._hand_task.done():
            self._hand_task = asyncio.create_task(self._hand_over(), name="engine-hand-over")
        return True

    async def _hand_over(self) -> None:
        """Send the handed slots, one statement at a time (those handed meanwhile go with the
        next), and start what they got. A slot that got nothing (no due delivery, or its
        endpoint no longer plain) goes back to the claim."""
        while self._handing:
            handing, self._handing = self._handing, []
            async with self._leasing:
                await self._hand_over_once(handing)

    async def _hand_over_once(self, handing: list[tuple[str, str]]) -> None:
        rows: list[queue.Claimed] = []
        done_ids = [delivery_id for delivery_id, _ in handing]
        try:
            rows = await queue.hand_over(
                self.db,
                owner=self.owner,
                now=self.clock.now(),
                done_ids=done_ids,
                default_concurrency=self.settings.max_concurrency_per_webhook,
                finished=self.recorder.finished(but=done_ids),
            )
        except Exception as exc:  # the slots go back to the claim; see RECONCILE_SECONDS
            self._reconcile_at = 0.0  # it may have committed with its answer lost
            if not isinstance(exc, DispatcherError):
                log.exception("engine.hand_over_failed")
        got = Counter(row.webhook_id for row in rows)
        unused = []
        for delivery_id, webhook_id in handing:
            if got[webhook_id] > 0:
                got[webhook_id] -= 1
            else:
                unused.append(delivery_id)
        self.recorder.handed(done_ids, unused)
        if unused:
            self.poke()
        if self._stopping:
            return  # what it leased is handed back with the rest (`queue.leave`)
        self.slots_handed += len(rows)
        for row in rows:
            self._start_attempt(row)

    async def _hand_back_grant(self, claimed: queue.Claimed, late: float) -> None:
        """A grant that came too late to send: the lease goes back, the delivery due now (it
        waits for the bucket again; the token it took is lost, so the endpoint gets fewer
        requests, never more). If the hand-back fails, the lease comes back with the next
        reconciliation (RECONCILE_SECONDS)."""
        self.grants_expired += 1
        log.info("engine.rate_grant_expired", delivery_id=claimed.id,
                 webhook_id=claimed.webhook_id, late_ms=round(late * 1000))  # fmt: skip
        with contextlib.suppress(DispatcherError):
            await queue.release(
                self.db, owner=self.owner, delivery_ids=[claimed.id], now=self.clock.now()
            )

    def _observe(
        self, claimed: queue.Claimed, outcome: Outcome, lag: float, finished: datetime
    ) -> None:
        """Noted in memory; written to the metrics once per claim (AttemptTally)."""
        e2e = None
        if outcome.succeeded:
            e2e = max((finished - claimed.event_created_at).total_seconds(), 0.0)
        self._tally.add(
            outcome.kind,
            outcome.status,
            outcome.elapsed_ms / 1000,
            max(lag, 0.0),
            e2e,
            claimed.webhook_id,
        )

    def _policy(self, schedule: list[int] | None) -> RetryPolicy:
        """The endpoint's retry schedule as read at the claim, or DISPATCHER_RETRY_SCHEDULE."""
        if schedule is None:
            return self.policy
        return dataclasses.replace(self.policy, schedule=tuple(map(float, schedule)))

    def _result(
        self, claimed: queue.Claimed, outcome: Outcome, started_at: datetime
    ) -> outcomes.AttemptResult:
        """The attempt as it is recorded, with what the domain decides it means."""
        now = self.clock.now()
        decision = outcomes.decide(
            outcome.kind,
            outcome.status,
            attempts_made=claimed.attempts + 1,
            policy=self._policy(claimed.endpoint.retry_schedule),
            now=now,
            retry_after=outcome.retry_after,
            rand=self.rand,
            charged=not outcome.proxy_failure,
        )
        return outcomes.AttemptResult(
            id=claimed.id,
            webhook_id=claimed.webhook_id,
            attempts_before=claimed.attempts,
            response_status=outcome.status,
            response_ms=outcome.elapsed_ms,
            last_error=outcomes.last_error(decision, outcome.error),
            finished_at=now,
            decision=decision,
            started_at=started_at,
            outcome=outcome.kind,
            response_body=outcome.response_body,
            in_lane=claimed.in_lane,
            throttled=claimed.adapted_rate is not None,
        )
