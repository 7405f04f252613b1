"""The Idempotency-Key rules every door that takes one shares (POST /v1/events, its batch,
POST /v1/messages): one home for the window and for what a later request under a used key
gets. Each door serialises the requests of one key under an advisory lock (its own statement,
in its .sql file), looks the key up within the window, then asks `replays` whether the first
answer is replayed."""

from __future__ import annotations

from datetime import timedelta

from dispatcher.errors import IdempotencyKeyReused

# A key belongs to the first request that used it, in its workspace, for this long; then it is
# free again.
IDEMPOTENCY_WINDOW = timedelta(hours=24)


def check_replay(
    first: bytes | None, fingerprint: bytes | None, *, item: int | None = None
) -> None:
    """Let a request replay the first answer under its key only when it says the same thing
    (the same fingerprint); otherwise raise IdempotencyKeyReused (`item`: its place in a
    batch). A first request without a fingerprint (stored before fingerprints existed) replays
    for any request, as it did then."""
    if first is not None and first != fingerprint:
        raise IdempotencyKeyReused(item=item)
