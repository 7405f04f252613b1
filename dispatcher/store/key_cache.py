"""Valid API keys kept in memory, forgotten at once when any key changes.

Every API request starts with "which key is this?": without a cache that is a statement of its
own before the one that does the work, a round trip and a sixth of the API's CPU. Keys are read
far more often than they change, so a process keeps the keys it has seen valid, and the
database tells it when to forget them: a trigger on `api_keys` notifies `dispatcher_api_keys`
on every revocation, deletion or TRUNCATE (schema version 4), and the listener clears the cache.

What makes "revoked means refused at once" hold:
- the process that revokes a key clears its own cache before answering (`revoke_key`);
- every other process hears the notification as soon as the revoking transaction commits;
- while the listening connection is down, nothing is served from the cache (every request
  looks its key up), and the cache is cleared when it is back;
- a lookup that started before a clear never puts its (possibly stale) answer in the cache
  after it: each clear starts a new generation, and an answer is kept only in its own;
- an entry is trusted for `MAX_AGE` seconds at most, a bound for the unforeseen.

Only valid keys are kept; an unknown key is looked up every time (it is an attacker's or a
typo, not traffic worth serving fast), so the cache's size is bounded by the keys in use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.store.notifications import Listener

KEYS_CHANNEL = "dispatcher_api_keys"
MAX_AGE = 60.0
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class ApiKey:
    id: str
    workspace_id: str
    scopes: frozenset[str]
    # The one webhook its `webhooks:poll` scope is limited to (None: not limited).
    webhook_id: str | None = None


class KeyCache:
    """Key hash -> ApiKey, served only while `watch` hears every key change."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._entries: dict[bytes, tuple[ApiKey, float]] = {}
        self._listener: Listener | None = None
        self.generation = 0

    @property
    def listening(self) -> bool:
        return self._listener is not None and self._listener.connected

    async def watch(self, url: str) -> None:
        """Listen for key changes until cancelled; the cache serves only while this listens.
        (Re)connecting clears it: a change missed while away is forgotten with the rest."""
        self._listener = Listener(url, KEYS_CHANNEL, self.clear)
        try:
            await self._listener.run()
        finally:
            self._listener = None
            self.clear()

    def get(self, digest: bytes) -> ApiKey | None:
        if not self.listening:
            return None
        entry = self._entries.get(digest)
        if entry is None:
            return None
        key, stored_at = entry
        if self._monotonic() - stored_at > MAX_AGE:
            del self._entries[digest]
            return None
        return key

    def put(self, digest: bytes, key: ApiKey, generation: int) -> None:
        """Keep `key`, looked up during `generation`, unless a clear came since."""
        if generation != self.generation or not self.listening:
            return
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[digest] = (key, self._monotonic())

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()
