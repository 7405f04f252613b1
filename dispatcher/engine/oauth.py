"""OAuth 2.0 client credentials for the endpoints whose `auth` says so (docs/delivery.md,
"OAuth 2.0 tokens"; the rules and the token's request and answer: domain/endpoint_auth.py).

An attempt to such an endpoint first takes the webhook's access token, then sends with
`Authorization: Bearer <token>`:

- The token is asked of `tokenUrl` with the client credentials grant (RFC 6749 section 4.4:
  a form body, HTTP Basic client authentication), through the engine's own HTTP/1.1 client
  (engine/http1.py, a pool of its own) and the same address guard as every attempt: a literal
  IP is judged before the request, a name's addresses after the lookup the connection uses.
- It is kept, per webhook and per credentials (a PATCH of `auth` is a new token), until
  shortly before its `expires_in` (`endpoint_auth.lifetime`), counted from when it was asked
  for; one process's attempts share it.
- One token request at a time per webhook: attempts that need a token while one is being
  fetched wait for that one (a failure is every waiter's failure). So a thousand deliveries
  cost one token request per lifetime, not a thousand.
- A 401 from the receiver drops the token it was sent with (unless another replaced it
  already) and the attempt is sent once more with a fresh one; a second 401 is the attempt's
  answer, recorded as such.

When no token can be had, the attempt is not sent: it is recorded as failed with the token
endpoint's words (`OAuth token endpoint: HTTP 500`), no response status (the receiver was not
asked), and follows the schedule like any failure. The client secret and the tokens appear in
no log, no error and no excerpt (an excerpt redacts them as it does the secret headers).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import structlog

from dispatcher import __version__
from dispatcher.domain.addresses import Network, blocked_error, blocked_reason
from dispatcher.domain.endpoint_auth import (
    OAuth2Client,
    Token,
    TokenRefused,
    read_token,
    token_failure,
    token_request,
)
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.domain.urls import InvalidUrl, parse_webhook_url
from dispatcher.engine import http1
from dispatcher.engine.http1 import BlockedAddress, Http1Client, RequestFailed, Resolver
from dispatcher.engine.sender import CustomHeaders, Outcome, Sender

log = structlog.get_logger("dispatcher.engine")

# The token request's fixed headers (its Authorization, the client's credentials, is added).
TOKEN_HEADERS = {
    "Content-Type": "application/x-www-form-urlencoded",
    "Accept": "application/json",
    "User-Agent": f"dispatcher/{__version__}",
}
# Connections kept open to token endpoints, in all (a pool apart from the attempts').
MAX_TOKEN_CONNECTIONS = 64
# Tokens kept; past it the cache starts afresh (tokens of deleted webhooks go then).
MAX_CACHED = 10_000
UNAUTHORIZED = 401
UNUSABLE = "the webhook's auth cannot be used: set it again with a PATCH"

Key = tuple[str, OAuth2Client]  # the webhook, its credentials


class TokenFailed(Exception):
    """No token: the attempt is recorded with `kind` and `error` (the token endpoint's
    words)."""

    def __init__(self, kind: AttemptOutcome, error: str, code: str | None = None) -> None:
        super().__init__(error)
        self.kind = kind
        self.error = error
        self.code = code  # the token endpoint's error code (RFC 6749 section 5.2), if any


class _Kept(NamedTuple):
    value: str
    until: float  # `now()` time after which it is asked for again


class Tokens:
    """The access tokens of the engine's OAuth endpoints: fetched, kept, shared, renewed."""

    def __init__(
        self,
        *,
        timeout: float,
        allowed: Sequence[Network],
        resolver: Resolver | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        """`timeout`: a token request's time limit when the endpoint has none of its own;
        `allowed`, `resolver`: the address guard's and the lookup's, as the sender's; `now`:
        the clock a token's lifetime is counted on (tests move it)."""
        self.timeout = timeout
        self.allowed = tuple(allowed)
        self.resolver = resolver
        self.now = now
        self.requests = 0  # token requests sent (for tests and debugging)
        self._client: Http1Client | None = None
        self._kept: dict[Key, _Kept] = {}
        self._fetching: dict[Key, asyncio.Task[str]] = {}

    async def start(self) -> None:
        self._client = Http1Client(
            timeout=self.timeout,
            allowed=self.allowed,
            max_connections=MAX_TOKEN_CONNECTIONS,
            headers=TOKEN_HEADERS,
            resolver=self.resolver,
            excerpt_bytes=http1.MAX_BODY_BYTES,
        )

    async def close(self) -> None:
        for task in list(self._fetching.values()):
            task.cancel()
        self._fetching.clear()
        self._kept.clear()
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- tokens ------------------------------------------------------------------------------

    async def token(self, key: Key, time_limit: float | None = None) -> str:
        """The webhook's token: the one kept while it lasts, else the one being fetched, else
        a new one (TokenFailed when none can be had)."""
        kept = self._kept.get(key)
        if kept is not None and self.now() < kept.until:
            return kept.value
        fetching = self._fetching.get(key)
        if fetching is None:
            fetching = asyncio.create_task(self._fetch(key, time_limit), name="oauth-token")
            self._fetching[key] = fetching
            fetching.add_done_callback(lambda task: self._fetched(key, task))
        # Shielded: an attempt cancelled while waiting (a shutdown) leaves the others' fetch.
        return await asyncio.shield(fetching)

    def _fetched(self, key: Key, task: asyncio.Task[str]) -> None:
        if self._fetching.get(key) is task:
            del self._fetching[key]
        if not task.cancelled():
            task.exception()  # retrieved: a failure is each waiter's, never "never retrieved"

    def drop(self, key: Key, token: str) -> None:
        """The receiver refused `token`: forget it, unless another has replaced it already
        (then the attempts that failed with it share that one, no new request)."""
        kept = self._kept.get(key)
        if kept is not None and kept.value == token:
            del self._kept[key]

    async def _fetch(self, key: Key, time_limit: float | None) -> str:
        webhook_id, client = key
        asked = self.now()
        try:
            token = await self._request(client, time_limit)
        except TokenFailed as exc:  # logged once per request, not once per attempt waiting
            log.info("oauth.token_failed", webhook_id=webhook_id, error=exc.error,
                     error_code=exc.code)  # fmt: skip
            raise
        if len(self._kept) >= MAX_CACHED:
            self._kept.clear()
        self._kept[key] = _Kept(token.value, asked + token.lifetime)
        log.debug("oauth.token_fetched", webhook_id=webhook_id, lifetime=token.lifetime)
        return token.value

    async def _request(self, client: OAuth2Client, time_limit: float | None) -> Token:
        """One token request, or TokenFailed in plain words."""
        assert self._client is not None, "Tokens.start() first"
        try:
            target = parse_webhook_url(client.token_url)
        except InvalidUrl as exc:
            raise TokenFailed(
                AttemptOutcome.CONNECTION_ERROR,
                token_failure(f"the URL cannot be attempted: {exc}"),
            ) from None
        reason = None if target.ip is None else blocked_reason(target.ip, self.allowed)
        if reason is not None:
            raise TokenFailed(AttemptOutcome.BLOCKED, token_failure(blocked_error(reason)))
        basic, form = token_request(client)
        headers = http1.header_lines((("Authorization", basic),))
        self.requests += 1
        try:
            status, _, answer = await self._client.post(
                client.token_url, headers, form, None, time_limit
            )
        except TimeoutError:
            timeout = f"timeout after {time_limit or self.timeout:g}s"
            raise TokenFailed(AttemptOutcome.TIMEOUT, token_failure(timeout)) from None
        except BlockedAddress as exc:
            raise TokenFailed(
                AttemptOutcome.BLOCKED, token_failure(blocked_error(str(exc)))
            ) from None
        except RequestFailed as exc:
            raise TokenFailed(AttemptOutcome.CONNECTION_ERROR, token_failure(str(exc))) from None
        except OSError as exc:
            error = f"connection error: {exc.strerror or 'I/O'}"
            raise TokenFailed(AttemptOutcome.CONNECTION_ERROR, token_failure(error)) from None
        except Exception:  # any other fault is still a plain failure of the token request
            raise TokenFailed(
                AttemptOutcome.CONNECTION_ERROR, token_failure(http1.UNEXPECTED)
            ) from None
        try:
            return read_token(status, answer)
        except TokenRefused as exc:
            raise TokenFailed(AttemptOutcome.CONNECTION_ERROR, str(exc), exc.code) from None

    # -- attempts ----------------------------------------------------------------------------

    async def send(
        self,
        sender: Sender,
        webhook_id: str,
        auth: Mapping[str, Any],
        url: str,
        delivery_id: str,
        secrets: Sequence[str],
        body: bytes,
        custom_headers: CustomHeaders = (),
        secret_values: Sequence[str] = (),
        send_by: float | None = None,
        time_limit: float | None = None,
        tls_webhook_id: str = "",
        tls: Mapping[str, Any] | None = None,
    ) -> Outcome:
        """`sender.send` (same arguments after `auth`) with the webhook's bearer token, sent
        once more with a new token after a 401. A custom `Authorization` header gives way to
        the token's. The outcome's time is the attempt's, the token's request included."""
        started = time.perf_counter()
        try:
            key = (webhook_id, OAuth2Client.of(auth))
        except (KeyError, TypeError, ValueError):  # stored past the API: never sent half-made
            return Outcome(AttemptOutcome.CONNECTION_ERROR, None, _ms_since(started), UNUSABLE)
        custom = tuple((n, v) for n, v in custom_headers if n.lower() != "authorization")
        hidden = (*secret_values, key[1].client_secret)

        def failed(exc: TokenFailed) -> Outcome:
            return Outcome(exc.kind, None, _ms_since(started), exc.error)

        try:
            token = await self.token(key, time_limit)
        except TokenFailed as exc:
            return failed(exc)
        outcome = await sender.send(
            url, delivery_id, secrets, body, custom, hidden, send_by, time_limit,
            tls_webhook_id, tls, bearer=token,
        )  # fmt: skip
        if outcome.status == UNAUTHORIZED:
            self.drop(key, token)
            try:
                token = await self.token(key, time_limit)
            except TokenFailed as exc:
                return failed(exc)
            outcome = await sender.send(
                url, delivery_id, secrets, body, custom, hidden, None, time_limit,
                tls_webhook_id, tls, bearer=token,
            )  # fmt: skip
        return outcome._replace(elapsed_ms=_ms_since(started))


def _ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)
