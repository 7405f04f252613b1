"""Concurrent publishes without an Idempotency-Key, coalesced into shared commits.

Stored alone, each POST /v1/events is one statement and one commit: under load the API is
bound by commits (a WAL flush each) and by the per-statement cost on both sides, not by the
work of storing an event. A process answering many publishes at once therefore gathers those
that arrive while earlier ones are being written, and writes each gathering in ONE
`dispatcher_append_events` statement, atomic on its own (one commit).

What each request is still promised:
- it is answered only after the commit that stored its event, with that event's own envelope
  (the stored payload, the bytes every delivery carries);
- a publish meets no other request's input: every event was validated before it was handed
  over (type, data, number, ordering key), and the statement has no per-row check that could
  refuse one event's content, so a shared statement fails only as a whole, for reasons that
  are nobody's input (the database away: each request gets the 503 it would have got alone,
  and nothing of the gathering is stored);
- a publish that finds nothing in flight is written at once, alone: coalescing adds no wait
  when there is nothing to share a commit with.

Events published one after another by one client keep their order: the second is handed over
after the first was answered, so it joins a later gathering, whose `createdAt` is not earlier
(each gathering stores its events at the latest of their requests' times).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from dispatcher import metrics

# At most this many events per statement (POST /v1/events/batch's bound too), and at most this
# many statements in flight at once: while they are, arrivals gather for the next one.
MAX_BATCH = 100
MAX_IN_FLIGHT = 4

EventT = TypeVar("EventT")
# Writes one gathering, atomically: (events, created_at) -> each event's payload, in order.
Write = Callable[[Sequence[EventT], datetime], Awaitable[Sequence[str]]]


@dataclass
class Pending(Generic[EventT]):
    """One request's event, waiting for the commit that stores it."""

    event: EventT
    now: datetime
    answer: asyncio.Future[str] = field(repr=False)


class PublishBatcher(Generic[EventT]):
    """Gathers the events handed to `publish` while statements are in flight (module
    docstring). One per pool: the statements it runs take the pool's connections."""

    def __init__(self, *, max_batch: int = MAX_BATCH, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.max_batch = max_batch
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self._waiting: list[Pending[EventT]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def publish(self, event: EventT, now: datetime, write: Write[EventT]) -> str:
        """Store `event` (already validated), published at `now`, with whatever else is
        waiting; its payload once committed. Raises what the shared write raised (a
        DatabaseUnavailable, an Overloaded before anything was written)."""
        pending = Pending(event, now, asyncio.get_running_loop().create_future())
        self._waiting.append(pending)
        if self.in_flight < self.max_in_flight:
            self._start(write)
        # Shielded: a request that goes away does not take its event out of a statement that
        # may already be running (the event is stored or not with the others, as when alone).
        return await asyncio.shield(pending.answer)

    def _start(self, write: Write[EventT]) -> None:
        gathering = self._waiting[: self.max_batch]
        del self._waiting[: self.max_batch]
        self.in_flight += 1
        # A context of its own: the write belongs to no single request (nor to its deadline or
        # its "has committed" mark, store/database.py).
        task = asyncio.get_running_loop().create_task(
            self._write(gathering, write), name="publish-batch", context=contextvars.Context()
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, gathering: list[Pending[EventT]], write: Write[EventT]) -> None:
        try:
            metrics.PUBLISH_BATCH_SIZE.observe(len(gathering))
            payloads = await write([p.event for p in gathering], max(p.now for p in gathering))
        except asyncio.CancelledError:
            for pending in gathering:
                pending.answer.cancel()
            raise
        except Exception as exc:
            for pending in gathering:
                if not pending.answer.done():
                    pending.answer.set_exception(exc)
        else:
            for pending, payload in zip(gathering, payloads, strict=True):
                if not pending.answer.done():
                    pending.answer.set_result(payload)
        finally:
            self.in_flight -= 1
            if self._waiting:
                self._start(write)
