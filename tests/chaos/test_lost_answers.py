"""A write whose acknowledgement is lost with the connection: the answer tells what happened.

The forwarder passes the write to Postgres (a COMMIT, or a statement that commits on its own),
lets the server carry it out, and drops the connection before the server's answer reaches the
app. The app cannot know from that connection whether it was stored, so it looks, on a fresh
one: stored, the client gets the write's own success answer (once: one row); the database not
reachable to look, 503 `outcome_unknown` (retry with the same Idempotency-Key). A connection
lost before the COMMIT was sent stored nothing: 503 `unavailable`, however the check would go.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.store.database import Database
from tests.chaos.forwarder import COMMIT, Forwarder
from tests.conftest import Workspace

EVENT = {"type": "contact.updated", "data": {"id": "CT1"}}
# The statements that commit on their own (no key: no transaction of their own), and the one
# that publishes inside a keyed publish's transaction (before its COMMIT).
APPEND_EVENTS = b"dispatcher_append_events("
APPEND_EVENT = b"dispatcher_append_event($1"
CREATE_MESSAGE = b"INSERT INTO messages"


async def count(db: Database, sql: str, *args: Any) -> int:
    async with db.acquire() as conn:
        return int(await conn.fetchval(sql, *args))


@pytest.mark.parametrize(
    ("key", "marker"),
    [("lost-commit", COMMIT), (None, APPEND_EVENTS)],
    ids=["keyed-transaction", "statement-without-key"],
)
async def test_a_published_event_whose_commit_answer_was_lost_answers_202(
    forwarder: Forwarder,
    api: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    key: str | None,
    marker: bytes,
) -> None:
    forwarder.lose_answer_to = marker
    headers = ws.headers if key is None else {**ws.headers, "Idempotency-Key": key}
    resp = await api.post("/v1/events", json=EVENT, headers=headers)
    answer = await resp.json()
    assert forwarder.answers_lost == 1
    assert resp.status == 202, answer
    assert "Idempotent-Replayed" not in resp.headers
    assert await count(db, "SELECT count(*) FROM events WHERE workspace_id = $1", ws.id) == 1
    assert await count(db, "SELECT count(*) FROM events WHERE id = $1", answer["id"]) == 1
    assert answer["data"] == EVENT["data"]


async def test_a_batch_whose_commit_answer_was_lost_answers_202_with_every_event(
    forwarder: Forwarder,
    api: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
) -> None:
    forwarder.lose_answer_to = COMMIT
    events = [{**EVENT, "idempotencyKey": f"k{n}"} for n in range(3)] + [EVENT]
    resp = await api.post("/v1/events/batch", json={"events": events}, headers=ws.headers)
    answer = await resp.json()
    assert forwarder.answers_lost == 1
    assert resp.status == 202, answer
    ids = [event["id"] for event in answer["data"]]
    assert len(set(ids)) == 4
    stored = await count(db, "SELECT count(*) FROM events WHERE id = ANY($1::text[])", ids)
    assert stored == 4
    assert await count(db, "SELECT count(*) FROM events WHERE workspace_id = $1", ws.id) == 4


@pytest.mark.parametrize(
    ("key", "marker"),
    [("lost-commit", COMMIT), (None, CREATE_MESSAGE)],
    ids=["keyed-transaction", "statement-without-key"],
)
async def test_a_sent_message_whose_commit_answer_was_lost_answers_202(
    forwarder: Forwarder,
    api: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    key: str | None,
    marker: bytes,
) -> None:
    forwarder.lose_answer_to = marker
    headers = ws.headers if key is None else {**ws.headers, "Idempotency-Key": key}
    body = {"from": ws.number_id, "to": "+15550100001", "text": "hello"}
    resp = await api.post("/v1/messages", json=body, headers=headers)
    answer = await resp.json()
    assert forwarder.answers_lost == 1
    assert resp.status == 202, answer
    assert answer["text"] == "hello"
    assert await count(db, "SELECT count(*) FROM messages WHERE workspace_id = $1", ws.id) == 1
    assert await count(db, "SELECT count(*) FROM messages WHERE id = $1", answer["id"]) == 1


@pytest.mark.parametrize("marker", [COMMIT, APPEND_EVENTS], ids=["transaction", "statement"])
async def test_a_lost_commit_answer_that_cannot_be_checked_is_outcome_unknown(
    forwarder: Forwarder,
    via_forwarder: Database,
    api: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    marker: bytes,
) -> None:
    via_forwarder.settle_timeout = 0.5
    forwarder.lose_answer_to = marker
    forwarder.down_after_loss = True  # the database is unreachable from then on
    headers = {**ws.headers, "Idempotency-Key": "unknown"} if marker == COMMIT else ws.headers
    resp = await api.post("/v1/events", json=EVENT, headers=headers)
    answer = await resp.json()
    assert forwarder.answers_lost == 1
    assert resp.status == 503, answer
    assert answer["code"] == "outcome_unknown"
    assert "Idempotency-Key" in answer["message"]
    assert resp.headers["Retry-After"] == "1"
    # It was stored (the server committed): the retry the answer asks for replays it.
    assert await count(db, "SELECT count(*) FROM events WHERE workspace_id = $1", ws.id) == 1
    if marker == COMMIT:
        await forwarder.open()
        again = await api.post("/v1/events", json=EVENT, headers=headers)
        assert again.status == 202, await again.text()
        assert again.headers["Idempotent-Replayed"] == "true"
        assert await count(db, "SELECT count(*) FROM events WHERE workspace_id = $1", ws.id) == 1


@pytest.mark.parametrize("down", [False, True], ids=["reachable", "unreachable"])
async def test_a_connection_lost_before_the_commit_stored_nothing_and_says_so(
    forwarder: Forwarder,
    via_forwarder: Database,
    api: TestClient[Any, Any],
    ws: Workspace,
    db: Database,
    down: bool,
) -> None:
    """Inside a keyed publish's transaction, the append's answer is lost: COMMIT was never
    sent, so nothing can have been stored, and the answer says so without looking."""
    via_forwarder.settle_timeout = 0.5
    forwarder.lose_answer_to = APPEND_EVENT
    forwarder.down_after_loss = down
    headers = {**ws.headers, "Idempotency-Key": "before-commit"}
    resp = await api.post("/v1/events", json=EVENT, headers=headers)
    answer = await resp.json()
    assert forwarder.answers_lost == 1
    assert resp.status == 503, answer
    assert answer["code"] == "unavailable"
    assert "nothing was stored" in answer["message"]
    assert await count(db, "SELECT count(*) FROM events WHERE workspace_id = $1", ws.id) == 0
