"""Sending one attempt: the only module that uses an HTTP client.

One pooled `ClientSession` per process (keep-alive, DNS cache, a total connection limit).
Every destination passes the address guard, applied to the addresses actually connected to:
literal IPs before the request, names inside the resolver, so a name cannot resolve to one
address when checked and another when connected.

`send` never raises (but for cancellation): whatever goes wrong at any stage (the URL, the
resolver, connecting, sending, reading) comes back as an Outcome with a plain message, so
every attempt is recorded and follows the retry schedule.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from dispatcher import __version__
from dispatcher.domain.addresses import Network, blocked_reason
from dispatcher.domain.signing import secret_key, sign
from dispatcher.domain.urls import InvalidUrl, parse_webhook_url

MAX_RESPONSE_BYTES = 64 * 1024
USER_AGENT = f"dispatcher/{__version__}"


class BlockedAddress(OSError):
    """The destination resolves only to addresses the guard refuses."""


@dataclass(frozen=True)
class Outcome:
    kind: str  # success | http_error | timeout | connection_error | blocked
    status: int | None
    elapsed_ms: int
    error: str | None
    retry_after: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.kind == "success"


class GuardedResolver(AbstractResolver):
    """Resolves as usual, then drops every address the guard refuses."""

    def __init__(self, allowed: Sequence[Network], inner: AbstractResolver | None = None) -> None:
        self.allowed = tuple(allowed)
        self.inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        kept = []
        reasons = []
        for result in results:
            reason = blocked_reason(ipaddress.ip_address(result["host"]), self.allowed)
            if reason is None:
                kept.append(result)
            else:
                reasons.append(reason)
        if not kept:
            raise BlockedAddress(reasons[0] if reasons else "no address")
        return kept

    async def close(self) -> None:
        await self.inner.close()


class Sender:
    def __init__(
        self,
        *,
        timeout: float,
        allowed: Sequence[Network],
        max_connections: int,
        wall_clock: Callable[[], float] = time.time,
        resolver: AbstractResolver | None = None,
        trace_configs: Sequence[aiohttp.TraceConfig] = (),
    ) -> None:
        self.timeout = timeout
        self.allowed = tuple(allowed)
        self.max_connections = max_connections
        self.wall_clock = wall_clock
        self.inner_resolver = resolver
        self.trace_configs = list(trace_configs)
        self._session: aiohttp.ClientSession | None = None
        self._keys: dict[str, bytes] = {}
        self._verdicts: dict[str, tuple[str, str] | None] = {}

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.max_connections,
            limit_per_host=0,
            use_dns_cache=True,
            ttl_dns_cache=30,
            resolver=GuardedResolver(self.allowed, self.inner_resolver),
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            trust_env=False,  # never route webhooks through an ambient proxy
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding",),
            trace_configs=self.trace_configs or None,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _key(self, secret: str) -> bytes:
        key = self._keys.get(secret)
        if key is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            key = self._keys[secret] = secret_key(secret)
        return key

    def _url_verdict(self, url: str) -> tuple[str, str] | None:
        """(outcome kind, error) when the URL must not be attempted, else None: a URL the
        sender cannot parse, or a literal IP the guard refuses (names are judged by the
        resolver). Cached, since the same few URLs come back for every delivery."""
        try:
            return self._verdicts[url]
        except KeyError:
            pass
        verdict: tuple[str, str] | None = None
        try:
            target = parse_webhook_url(url)
        except InvalidUrl as exc:
            verdict = ("connection_error", f"the URL cannot be attempted: {exc}")
        else:
            reason = None if target.ip is None else blocked_reason(target.ip, self.allowed)
            if reason is not None:
                verdict = ("blocked", f"blocked: {reason}")
        if len(self._verdicts) > 100_000:
            self._verdicts.clear()
        self._verdicts[url] = verdict
        return verdict

    def headers(self, delivery_id: str, secrets: Sequence[str], body: bytes) -> dict[str, str]:
        timestamp = int(self.wall_clock())
        return {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "webhook-id": delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(
                [self._key(s) for s in secrets], delivery_id, timestamp, body
            ),
        }

    async def send(
        self, url: str, delivery_id: str, secrets: Sequence[str], body: bytes
    ) -> Outcome:
        assert self._session is not None, "Sender.start() first"
        started = time.perf_counter()

        def done(kind: str, status: int | None, error: str | None, **extra: Any) -> Outcome:
            elapsed = int((time.perf_counter() - started) * 1000)
            return Outcome(kind, status, elapsed, error, **extra)

        verdict = self._url_verdict(url)
        if verdict is not None:
            return done(verdict[0], None, verdict[1])
        try:
            async with self._session.post(
                url,
                data=body,
                headers=self.headers(delivery_id, secrets, body),
                allow_redirects=False,
            ) as response:
                complete = await _drain(response)
                if not complete:
                    response.close()  # do not keep a connection with unread bytes
                status = response.status
                if 200 <= status < 300:
                    return done("success", status, None)
                error = f"HTTP {status}"
                if 300 <= status < 400:
                    error += " (redirects are not followed)"
                return done(
                    "http_error", status, error, retry_after=response.headers.get("Retry-After")
                )
        except TimeoutError:
            return done("timeout", None, f"timeout after {self.timeout:g}s")
        except aiohttp.ClientConnectorDNSError as exc:
            if isinstance(exc.os_error, BlockedAddress):
                return done("blocked", None, f"blocked: {exc.os_error}")
            return done("connection_error", None, "DNS lookup failed")
        except aiohttp.ClientConnectorCertificateError:
            return done("connection_error", None, "TLS certificate verification failed")
        except aiohttp.ClientSSLError:
            return done("connection_error", None, "TLS handshake failed")
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            return done(
                "connection_error", None, "connection refused" if refused else "connection failed"
            )
        except aiohttp.ServerDisconnectedError:
            return done("connection_error", None, "connection closed before a response")
        except (aiohttp.ClientPayloadError, aiohttp.ClientResponseError):
            return done("connection_error", None, "response interrupted")
        except aiohttp.ClientError:
            return done("connection_error", None, "connection error: the request failed")
        except OSError as exc:
            return done("connection_error", None, f"connection error: {exc.strerror or 'I/O'}")
        except Exception:  # any other fault at any stage is still a recorded, failed attempt
            return done(
                "connection_error", None, "connection error: the request could not be completed"
            )


async def _drain(response: aiohttp.ClientResponse) -> bool:
    """Read the body up to 64 KiB, then stop; True when the whole body was read."""
    read = 0
    while read < MAX_RESPONSE_BYTES:
        chunk = await response.content.read(MAX_RESPONSE_BYTES - read)
        if not chunk:
            return True
        read += len(chunk)
    return response.content.at_eof()
