"""Results are buffered and written in batches: one `unnest` statement per flush, when the
buffer is full or a few milliseconds have passed (as PgQueuer does).

Each result carries its decision (`dispatcher.domain.outcomes`); the store executes a batch of
them and says what came of it (given up, endpoints disabled), which is reported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Collection
from itertools import takewhile

import structlog

from dispatcher import metrics, tracing
from dispatcher.domain import outcomes
from dispatcher.domain.clock import Clock
from dispatcher.errors import DispatcherError
from dispatcher.store import queue
from dispatcher.store.database import Database

log = structlog.get_logger("dispatcher.engine")


class Recorder:
    def __init__(
        self,
        db: Database,
        *,
        owner: str,
        clock: Clock,
        disable_after: float,
        max_batch: int = 500,
        max_delay: float = 0.01,
        on_flushed: Callable[[], None] = lambda: None,
    ) -> None:
        self.db = db
        self.owner = owner
        self.clock = clock
        self.disable_after = disable_after
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.on_flushed = on_flushed
        self._buffer: list[outcomes.AttemptResult] = []
        self._has_items = asyncio.Event()
        self._full = asyncio.Event()
        self._lock = asyncio.Lock()
        self._healthy = True
        self._writing = 0  # how many of the buffer's first results a flush is writing now
        self._uncertain = 0  # how many of them a failed flush may have written all the same
        # Results whose slots were handed on to a new delivery (the engine's `_hand_on`): their
        # rows are still leased, but their slots are not the claim's to count free.
        self._handed: set[str] = set()
        # Those whose hand-over statement is still to answer: not written until it has (their
        # rows are locked by it; a record taking them first would leave the slot unhanded).
        self._pending: set[str] = set()
        self._answered = asyncio.Event()  # set by each hand-over's answer (`handed`)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def holding(self) -> list[str]:
        """The deliveries whose results are still to be written (a batch being written
        included: it leaves the buffer only once committed); their leases are still held."""
        return [result.id for result in self._buffer]

    def finishing(self) -> Counter[str]:
        """Per endpoint, the attempts whose results wait to be written: their requests are over,
        so the claim counts their slots as free (queue.claim). A batch being written is left
        out: its record may commit before the claim's snapshot, and then its rows are no
        longer leased; counted as busy, they are at worst freed one claim later. So is a batch
        whose flush failed (it may have committed, its answer lost)."""
        settled_maybe = max(self._writing, self._uncertain)
        return Counter(
            result.webhook_id
            for result in self._buffer[settled_maybe:]
            if result.id not in self._handed
        )

    def finished(self, but: Collection[str] = ()) -> Counter[str]:
        """Per endpoint, every attempt whose result waits to be written or is being written
        (handed on or not), but for the results `but`: requests that are over, what a
        hand-over counts (the claim counts `finishing`)."""
        left_out = set(but)
        return Counter(result.webhook_id for result in self._buffer if result.id not in left_out)

    def hand(self, delivery_id: str) -> None:
        """The slot of buffered result `delivery_id` is being handed on: not free to claim,
        and the result is not written until the hand-over has answered (`handed`)."""
        self._handed.add(delivery_id)
        self._pending.add(delivery_id)

    def handed(self, delivery_ids: Collection[str], unused: Collection[str]) -> None:
        """The hand-over of `delivery_ids` answered; the slots of `unused` got nothing: they
        are free to claim again (while their results wait)."""
        self._pending.difference_update(delivery_ids)
        self._handed.difference_update(unused)
        self._answered.set()

    @property
    def held_back(self) -> bool:
        """Whether the next result to write waits for its hand-over to answer."""
        return bool(self._buffer) and self._buffer[0].id in self._pending

    def add(self, result: outcomes.AttemptResult) -> None:
        self._buffer.append(result)
        self._has_items.set()
        if len(self._buffer) >= self.max_batch:
            self._full.set()

    async def run(self) -> None:
        backoff = 0.1
        while True:
            await self._has_items.wait()
            if len(self._buffer) < self.max_batch:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), timeout=self.max_delay)
            self._answered.clear()
            if self.held_back:  # nothing to write before a hand-over answers: wait for it
                await self._answered.wait()
                continue
            if await self.flush_once():
                backoff = 0.1
            else:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def flush_once(self) -> bool:
        """Write up to one batch; False when the database refused (results are kept)."""
        async with self._lock:
            batch = self._buffer[: self.max_batch]
            if self._pending:  # up to the first result whose hand-over has not answered
                batch = list(takewhile(lambda result: result.id not in self._pending, batch))
            if not batch:
                if not self._buffer:
                    self._has_items.clear()
                return True
            started = time.perf_counter()
            span = tracing.record_started(len(batch)) if tracing.ENABLED else None
            self._writing = len(batch)
            try:
                recorded = await queue.record(
                    self.db,
                    owner=self.owner,
                    results=batch,
                    now=self.clock.now(),
                    disable_after=self.disable_after,
                )
            except Exception as exc:  # keep the results; try again after a backoff
                # The record may have committed with its answer lost: until a flush succeeds,
                # these rows may be unleased already, so their slots are not counted as free.
                self._writing = 0
                self._uncertain = len(batch)
                if span is not None:
                    tracing.record_ended(span, exc)
                if self._healthy:
                    if isinstance(exc, DispatcherError):
                        log.warning(
                            "recorder.unavailable", error=str(exc), buffered=len(self._buffer)
                        )
                    else:
                        log.exception("recorder.failed", buffered=len(self._buffer))
                self._healthy = False
                return False
            if not self._healthy:
                log.info("recorder.recovered", buffered=len(self._buffer))
            self._healthy = True
            if span is not None:
                tracing.record_ended(span)
            metrics.RECORD_DURATION.observe(time.perf_counter() - started)
            metrics.RECORD_BATCH.observe(len(batch))
            del self._buffer[: len(batch)]
            self._handed.difference_update(result.id for result in batch)
            self._writing = self._uncertain = 0
            if not self._buffer:
                self._has_items.clear()
            self._full.clear()
            if len(self._buffer) >= self.max_batch:
                self._full.set()
        self._report(recorded)
        self.on_flushed()
        return True

    async def flush_all(self, deadline: float) -> int:
        """Write every buffered result, retrying until `deadline` (loop time). Returns how
        many could not be written; those are logged at error level with their delivery ids,
        since at shutdown nobody is left to write them later.

        A result that is never written leaves its delivery leased and pending: once the lease
        expires it is claimed and sent again, with the same `webhook-id` (at least once).
        """
        with contextlib.suppress(TimeoutError):
            # Bounded even when a connection attempt hangs (a server that does not answer).
            async with asyncio.timeout_at(deadline):
                while self._buffer:
                    self._answered.clear()
                    if self.held_back:
                        await self._answered.wait()
                    elif not await self.flush_once():
                        await asyncio.sleep(0.1)
        lost = list(self._buffer)
        if lost:
            log.error(
                "engine.results_lost",
                count=len(lost),
                delivery_ids=[r.id for r in lost],
                owner=self.owner,
                consequence="each is sent again, same webhook-id, when its lease expires",
            )
        return len(lost)

    def _report(self, recorded: queue.Recorded) -> None:
        for result, why in recorded.given_up:
            metrics.GIVEN_UP.labels(why).inc()
            log.warning(
                "delivery.given_up",
                delivery_id=result.id,
                webhook_id=result.webhook_id,
                reason=why.value,
                attempts=result.attempts_before + 1,
                last_error=result.last_error,
            )
        for webhook_id, reason in recorded.disabled.items():
            metrics.WEBHOOKS_DISABLED.labels(reason).inc()
            log.warning("webhook.disabled", webhook_id=webhook_id, reason=reason.value)
        for webhook_id, rate in recorded.adapted.items():
            # Flow control: the receiver's 429s moved the endpoint's rate (None: recovered).
            metrics.EFFECTIVE_RATES.set(webhook_id, rate)
            log.info("webhook.rate_adapted", webhook_id=webhook_id, effective_rate=rate)
