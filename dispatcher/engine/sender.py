"""Sending one attempt: the only module that uses an HTTP client.

One pooled client per process (keep-alive, DNS cache, a total connection limit): the lean
HTTP/1.1 client of `dispatcher.engine.http1`, built for this one request shape because
aiohttp's per-request cost was most of the worker's CPU. It is the only client: the tests
send through it too, and keep aiohttp's client only as the reference its parsing is compared
with (tests/engine/test_http1.py). Every destination passes the address guard, applied to the
addresses actually connected to: literal IPs before the request, names after the lookup the
connection uses, so a name cannot resolve to one address when checked and another when
connected.

`send` never raises (but for cancellation): whatever goes wrong at any stage (the URL, the
resolver, connecting, sending, reading) comes back as an Outcome with a plain message, so
every attempt is recorded and follows the retry schedule.

A webhook's custom headers (docs/webhooks.md) are written after the headers the service sets
(Host, Content-Type, User-Agent, Content-Length, the signature's three), and each is checked
first by the rules the API applied (dispatcher.domain.headers: no reserved name, so none can
stand beside or in place of ours) and then by the writer itself (`http1.header_lines`: no
line break can get through). A header that fails either is never sent: the attempt fails,
recorded, as with a URL that cannot be attempted. `Accept: */*` is sent unless a custom
header sets Accept.

An answer's excerpt (the attempt log's `responseBody`) is made here, and only here, and never
keeps what the attempt sent in secret: the signature, the signing secrets and the values of
the webhook's secret headers are redacted from it (dispatcher.domain.redaction), for a receiver
that echoes the request's headers.

With an egress proxy (DISPATCHER_EGRESS_PROXY, domain/proxy.py) a failure of the proxy itself
is a `connection_error` whose words start `egress proxy:` and whose Outcome says
`proxy_failure`: the delivery follows its schedule, but the endpoint is not charged with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from dispatcher import __version__
from dispatcher.domain.addresses import Network, blocked_error, blocked_reason
from dispatcher.domain.headers import header_problem
from dispatcher.domain.outcomes import AttemptOutcome
from dispatcher.domain.proxy import EgressProxy
from dispatcher.domain.redaction import redact, signing_values
from dispatcher.domain.signing import secret_key, sign
from dispatcher.domain.urls import InvalidUrl, parse_webhook_url
from dispatcher.engine import http1
from dispatcher.engine.client_tls import ClientContexts
from dispatcher.engine.http1 import (
    BlockedAddress,
    Http1Client,
    InvalidHeader,
    ProxyFailed,
    RequestFailed,
    Resolver,
    TooLate,
)

__all__ = [
    "MAX_RESPONSE_BYTES",
    "BlockedAddress",
    "Outcome",
    "Sender",
    "TooLate",
]

MAX_RESPONSE_BYTES = http1.MAX_BODY_BYTES
USER_AGENT = f"dispatcher/{__version__}"
# Sent on every request.
FIXED_HEADERS = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
# aiohttp also added `Accept: */*`: kept, so receivers see no change, unless a custom header
# sets its own Accept.
DEFAULT_ACCEPT = ("Accept", "*/*")
UNSENDABLE = "the webhook's custom headers cannot be sent"
UNUSABLE_TLS = "the webhook's client certificate cannot be used"

CustomHeaders = Sequence[tuple[str, str]]

SUCCESS = AttemptOutcome.SUCCESS
HTTP_ERROR = AttemptOutcome.HTTP_ERROR
TIMEOUT = AttemptOutcome.TIMEOUT
CONNECTION_ERROR = AttemptOutcome.CONNECTION_ERROR
BLOCKED = AttemptOutcome.BLOCKED


class Outcome(NamedTuple):
    """What one attempt came to, as the sender saw it (what it means for the delivery is
    `dispatcher.domain.outcomes.decide`'s to say)."""

    kind: AttemptOutcome
    status: int | None  # the answer's status, when there was an answer
    elapsed_ms: int
    error: str | None  # in plain words, as `lastError` shows it; None for a success
    retry_after: str | None = None  # the answer's Retry-After header, as sent
    # The answer body's first bytes (DISPATCHER_RESPONSE_EXCERPT_BYTES), decoded as UTF-8
    # with replacement; None without an answer or when none is kept.
    response_body: str | None = None
    # The egress proxy failed, not the receiver: not charged to the endpoint.
    proxy_failure: bool = False

    @property
    def succeeded(self) -> bool:
        return self.kind == AttemptOutcome.SUCCESS


class _Finish(Protocol):
    """Makes an attempt's Outcome, timed from the start of `send`."""

    def __call__(
        self,
        kind: AttemptOutcome,
        status: int | None,
        error: str | None,
        retry_after: str | None = None,
        excerpt: bytes | None = None,
    ) -> Outcome: ...


class Sender:
    """Sends attempts and turns whatever happens into an Outcome.

    `resolver` replaces the system's lookup (an `http1.Resolver`, as aiohttp's resolvers
    are; tests script answers with it). `exempt_urls` are URLs the guard lets through
    although their address is refused: exactly these strings, each naming its host by a
    literal IP (judged here, never looked up, so no name can be made to point elsewhere);
    `serve` passes its own demo receiver's (docs/webhooks.md), and every other URL, on the
    same host and port included, stays guarded.
    """

    def __init__(
        self,
        *,
        timeout: float,
        allowed: Sequence[Network],
        max_connections: int,
        wall_clock: Callable[[], float] = time.time,
        resolver: Resolver | None = None,
        excerpt_bytes: int = 0,
        exempt_urls: Collection[str] = (),
        proxy: EgressProxy | None = None,
    ) -> None:
        for url in exempt_urls:
            if parse_webhook_url(url).ip is None:
                raise ValueError(f"an exempt URL must name its host by IP address: {url}")
        self.exempt_urls = frozenset(exempt_urls)
        self.timeout = timeout
        self.excerpt_bytes = excerpt_bytes
        self.allowed = tuple(allowed)
        self.max_connections = max_connections
        self.wall_clock = wall_clock
        self.inner_resolver = resolver
        self.proxy = proxy
        self._proxy_secrets = proxy.secrets if proxy is not None else []
        self._client: Http1Client | None = None
        self._keys: dict[str, bytes] = {}
        self._extra: dict[tuple[tuple[str, str], ...], bytes] = {}
        self._verdicts: dict[str, tuple[AttemptOutcome, str] | None] = {}
        self.client_contexts = ClientContexts()  # mutual TLS: one per endpoint

    async def start(self) -> None:
        self._client = Http1Client(
            timeout=self.timeout,
            allowed=self.allowed,
            max_connections=self.max_connections,
            headers=FIXED_HEADERS,
            resolver=self.inner_resolver,
            excerpt_bytes=self.excerpt_bytes,
            proxy=self.proxy,
            direct_urls=self.exempt_urls,
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _key(self, secret: str) -> bytes:
        key = self._keys.get(secret)
        if key is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            key = self._keys[secret] = secret_key(secret)
        return key

    def _url_verdict(self, url: str) -> tuple[AttemptOutcome, str] | None:
        """(outcome kind, error) when the URL must not be attempted, else None: a URL the
        sender cannot parse, or a literal IP the guard refuses (names are judged after the
        lookup). Cached, since the same few URLs come back for every delivery."""
        try:
            return self._verdicts[url]
        except KeyError:
            pass
        verdict: tuple[AttemptOutcome, str] | None = None
        try:
            target = parse_webhook_url(url)
        except InvalidUrl as exc:
            verdict = (CONNECTION_ERROR, f"the URL cannot be attempted: {exc}")
        else:
            reason = None if target.ip is None else blocked_reason(target.ip, self.allowed)
            if reason is not None and url not in self.exempt_urls:
                verdict = (BLOCKED, blocked_error(reason))
        if len(self._verdicts) > 100_000:
            self._verdicts.clear()
        self._verdicts[url] = verdict
        return verdict

    def _extra_lines(self, custom: CustomHeaders) -> bytes:
        """The request's header lines after the signature: the custom headers, then
        `Accept: */*` unless they set Accept. InvalidHeader when one must not be sent (its
        message never quotes a value). Cached per set of headers: the same few come back."""
        key = tuple(custom)
        try:
            return self._extra[key]
        except KeyError:
            pass
        for name, value in key:
            problem = header_problem(name, value)
            if problem is not None:
                raise InvalidHeader(problem)
        fields = list(key)
        if not any(name.lower() == "accept" for name, _ in key):
            fields.append(DEFAULT_ACCEPT)
        lines = http1.header_lines(fields)
        if len(self._extra) > 10_000:
            self._extra.clear()
        self._extra[key] = lines
        return lines

    def _signed(self, delivery_id: str, secrets: Sequence[str], body: bytes) -> tuple[int, str]:
        """(webhook-timestamp, webhook-signature) for this attempt."""
        timestamp = int(self.wall_clock())
        keys = [self._key(s) for s in secrets]
        return timestamp, sign(keys, delivery_id, timestamp, body)

    def headers(self, delivery_id: str, secrets: Sequence[str], body: bytes) -> dict[str, str]:
        return self._headers(delivery_id, *self._signed(delivery_id, secrets, body))

    def _headers(self, delivery_id: str, timestamp: int, signature: str) -> dict[str, str]:
        return {
            "Content-Type": FIXED_HEADERS["Content-Type"],
            "User-Agent": USER_AGENT,
            "webhook-id": delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature,
        }

    async def send(
        self,
        url: str,
        delivery_id: str,
        secrets: Sequence[str],
        body: bytes,
        custom_headers: CustomHeaders = (),
        secret_values: Sequence[str] = (),
        send_by: float | None = None,
        time_limit: float | None = None,
        webhook_id: str = "",
        tls: Mapping[str, Any] | None = None,
        bearer: str | None = None,
    ) -> Outcome:
        """One attempt: `body` POSTed to `url`, signed with `secrets`, with the webhook's
        `custom_headers` (name, value) after ours; `secret_values` (its secret headers'
        values) are kept out of the excerpt, with the signature and `secrets`. With `send_by`
        (loop time), raises TooLate instead when the request could not be written by then
        (it was not sent: no attempt). `time_limit`: the endpoint's own, instead of the
        sender's (DISPATCHER_REQUEST_TIMEOUT). `tls`: webhook `webhook_id`'s mutual TLS
        (domain/tls.py), presented over connections of its own. `bearer`: an OAuth access
        token, sent as `Authorization: Bearer` (engine/oauth.py checked its characters) and
        kept out of the excerpt."""
        assert self._client is not None, "Sender.start() first"
        started = time.perf_counter()

        keep = self.excerpt_bytes > 0
        signature = ""

        def done(
            kind: AttemptOutcome,
            status: int | None,
            error: str | None,
            retry_after: str | None = None,
            excerpt: bytes | None = None,
        ) -> Outcome:
            elapsed = int((time.perf_counter() - started) * 1000)
            text = None
            if keep and excerpt is not None:
                text = excerpt.decode("utf-8", "replace")
                if text:
                    hidden = [
                        *signing_values(signature, secrets),
                        *secret_values,
                        *self._proxy_secrets,
                    ]
                    if bearer is not None:
                        hidden.append(bearer)
                    text = redact(text, hidden, cut_off=len(excerpt) >= self.excerpt_bytes)
            return Outcome(kind, status, elapsed, error, retry_after, text)

        verdict = self._url_verdict(url)
        if verdict is not None:
            return done(verdict[0], None, verdict[1])
        try:
            extra = self._extra_lines(custom_headers)
        except InvalidHeader as exc:
            return done(CONNECTION_ERROR, None, f"{UNSENDABLE}: {exc}")
        own = None
        if tls is not None:
            try:
                own = self.client_contexts.get(webhook_id, tls)
            except Exception:  # ssl.SSLError, OSError: still a recorded attempt
                return done(CONNECTION_ERROR, None, UNUSABLE_TLS)
        try:
            timestamp, signature = self._signed(delivery_id, secrets, body)
        except Exception:  # a secret that cannot key a signature: still a recorded attempt
            return done(CONNECTION_ERROR, None, http1.UNEXPECTED)
        try:
            headers = b"webhook-id: %b\r\nwebhook-timestamp: %d\r\nwebhook-signature: %b\r\n%b" % (
                delivery_id.encode(),
                timestamp,
                signature.encode(),
                extra,
            )
            if bearer is not None:
                headers += b"Authorization: Bearer %b\r\n" % bearer.encode("ascii")
            status, retry_after, excerpt = await self._client.post(
                url, headers, body, send_by, time_limit, own
            )
        except TooLate:
            raise
        except Exception as exc:  # any fault at any stage is still a recorded, failed attempt
            return self._failed(done, exc, time_limit)
        return _answered(done, status, retry_after, excerpt)

    def _failed(self, done: _Finish, exc: Exception, time_limit: float | None) -> Outcome:
        """The outcome of an attempt that got no answer, by what stopped it (the one place
        where an attempt's exception becomes its record)."""
        if isinstance(exc, TimeoutError):
            return done(TIMEOUT, None, f"timeout after {time_limit or self.timeout:g}s")
        if isinstance(exc, BlockedAddress):
            return done(BLOCKED, None, blocked_error(str(exc)))
        if isinstance(exc, ProxyFailed):
            return done(CONNECTION_ERROR, None, str(exc))._replace(proxy_failure=True)
        if isinstance(exc, RequestFailed):
            return done(CONNECTION_ERROR, None, str(exc))
        if isinstance(exc, OSError):
            return done(CONNECTION_ERROR, None, f"connection error: {exc.strerror or 'I/O'}")
        return done(CONNECTION_ERROR, None, http1.UNEXPECTED)


def _answered(done: _Finish, status: int, retry_after: str | None, excerpt: bytes) -> Outcome:
    """The outcome of an answer: 2xx is a success; anything else (a 3xx too: redirects are
    not followed) a failure that keeps Retry-After for the schedule."""
    if 200 <= status < 300:
        return done(SUCCESS, status, None, None, excerpt)
    error = f"HTTP {status}"
    if 300 <= status < 400:
        error += " (redirects are not followed)"
    return done(HTTP_ERROR, status, error, retry_after, excerpt)
