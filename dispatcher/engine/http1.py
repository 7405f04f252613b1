"""A lean HTTP/1.1 client for the one request the sender makes: POST a small body, read the
status of the answer.

Why not aiohttp's client: it is general (any method, streamed bodies, cookies, redirects,
proxies, tracing, header multidicts, a payload registry), and that generality was most of the
worker's CPU for a request that always has the same shape. Here a request costs one cached
route lookup, one bytes formatting, one `transport.write`, a parse of the answer's head with
`bytes.find`/`split`, and one future.

What it keeps from the sender's aiohttp set-up:

- The address guard, on the addresses actually connected to: names are judged here after the
  lookup (a literal IP is judged by the sender before), so a name cannot answer one address
  when checked and another when connected. Lookups are cached 30 s, as aiohttp's DNS cache.
- A keep-alive pool per (scheme, host, port), at most `max_connections` open in total (an
  idle connection to another destination is closed to make room); idle ones close after 15 s.
- One total timeout per request: waiting for a connection, looking up, connecting, sending and
  reading to the last byte.
- A name's addresses are raced as RFC 8305 ("Happy Eyeballs") says, with aiohttp's own
  library for it (aiohappyeyeballs): one that black-holes the connection costs 250 ms, not
  the whole timeout.
- At most 64 KiB of an answer's body is read; then the connection is dropped.

A connection is reused only after its answer was read completely and the server did not ask to
close it; on any error it is closed. A request on a reused connection that fails before any
byte of the answer arrived (the server closed the idle connection as the request crossed it on
the wire) is sent once more, on a new connection. The caveat of every client that does this:
a server that received the request, acted on it and closed without answering gets it twice.
Webhook receivers drop such duplicates by `webhook-id`, which is the same on both.

Failures raise `RequestFailed` with the plain words the sender records (`BlockedAddress` when
the guard refused every address of a name), or TimeoutError.

With an egress proxy (`proxy`, DISPATCHER_EGRESS_PROXY; the guard's part: domain/proxy.py)
each connection goes to the proxy: for https a CONNECT tunnel to the receiver's checked
address, then TLS inside it with the receiver's name as server name; for http absolute-form
requests (`POST http://address:port/path`). Connections stay pooled per (scheme, host, port)
of the receiver, so a tunnel only ever carries requests to the target it was opened for.
What the proxy itself fails at (connecting to it, its 407, a CONNECT it refuses, an error
answer it made itself) raises `ProxyFailed`, whose words start with `egress proxy:`.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol, cast

import aiohappyeyeballs
from yarl import URL

from dispatcher.domain.addresses import Network, blocked_reason
from dispatcher.domain.proxy import PROXY_ERROR, EgressProxy, ProxyTarget, proxy_target
from dispatcher.domain.urls import parse_webhook_url

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024
DNS_TTL_SECONDS = 30.0
IDLE_SECONDS = 15.0
HAPPY_EYEBALLS_DELAY = 0.25  # RFC 8305's recommended Connection Attempt Delay
_MAX_CACHED = 100_000

# What the sender records, in plain words (docs/delivery.md).
REFUSED = "connection refused"
CONNECT_FAILED = "connection failed"
CERTIFICATE = "TLS certificate verification failed"
HANDSHAKE = "TLS handshake failed"
# Mutual TLS (docs/delivery.md): the receiver's alert says why.
NO_CLIENT_CERTIFICATE = f"{HANDSHAKE}: the receiver requires a client certificate"
CLIENT_CERTIFICATE_REFUSED = f"{HANDSHAKE}: the receiver refused the client certificate"
DNS_FAILED = "DNS lookup failed"
CLOSED = "connection closed before a response"
INTERRUPTED = "response interrupted"
INVALID = "connection error: the response was not valid HTTP"
UNEXPECTED = "connection error: the request could not be completed"

_HEX = b"0123456789abcdefABCDEF"
# Where the answer being read is: its head, then its body by one of the framings.
_HEAD, _LENGTH, _UNTIL_CLOSE, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER = range(7)
_DONE, _CUT = 7, 8  # read completely; cut at MAX_BODY_BYTES

# scheme, host, port, pool: the connections that may serve a request. The pool is "" but for
# an endpoint with its own TLS context (mutual TLS: `Tls.pool`), whose connections no other
# endpoint's request may use.
Key = tuple[str, str, int, str]

# What a header line may hold, checked where lines are written whatever checked them before:
# a name is an RFC 9110 token; a value has no CR, LF, NUL or other control but tab, and no
# byte past ASCII. One field can never become two lines (header injection), even if a rule
# upstream were bypassed or a stored header predates it.
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e]*")


class RequestFailed(Exception):
    """The request failed; the message says how, in the words the sender records."""


class ProxyFailed(RequestFailed):
    """The egress proxy failed, not the receiver (the message starts `egress proxy:`)."""


class BlockedAddress(OSError):
    """The destination resolves only to addresses the guard refuses (the message says why)."""


class TooLate(Exception):
    """The request's moment passed before a byte of it was written (`post`'s `send_by`): it
    was not sent, and the connection stays usable."""


class InvalidHeader(ValueError):
    """A header that must not be written (the message never quotes its value)."""


def header_lines(fields: Iterable[tuple[str, str]]) -> bytes:
    """`Name: value\\r\\n` lines for `fields`, or InvalidHeader when a name is not a token or
    a value holds a character a header line cannot (see _FIELD_NAME, _FIELD_VALUE)."""
    lines = []
    for name, value in fields:
        raw_name = name.encode("utf-8", "surrogatepass")
        raw_value = value.encode("utf-8", "surrogatepass")
        if not _FIELD_NAME.fullmatch(raw_name):
            raise InvalidHeader("a header name is not an HTTP token")
        if not _FIELD_VALUE.fullmatch(raw_value):
            raise InvalidHeader(f"the value of header {name} has a character HTTP does not allow")
        lines.append(b"%b: %b\r\n" % (raw_name, raw_value))
    return b"".join(lines)


class Tls(NamedTuple):
    """An endpoint's own TLS (mutual TLS, engine/client_tls.py): its context, and the pool its
    connections are kept in, apart from every other endpoint's."""

    pool: str
    context: ssl.SSLContext


class _Stale(RequestFailed):
    """Closed before any byte of the answer: on a reused connection, worth one more try."""


class Response(NamedTuple):
    status: int
    retry_after: str | None
    excerpt: bytes  # the body's first `excerpt_bytes` bytes (de-chunked)


class Resolver(Protocol):
    """A name lookup as aiohttp's resolvers do it (so those can be passed in as they are)."""

    async def resolve(
        self, host: str, port: int = ..., family: socket.AddressFamily = ...
    ) -> Sequence[Mapping[str, object]]: ...


class _Route(NamedTuple):
    """What a URL needs, computed once: where to connect, and the request's fixed start."""

    key: Key
    host: str  # the name to look up, or the literal address (no brackets)
    literal: bool
    port: int
    tls: bool
    head: bytes  # request line, Host and the client's fixed headers
    proxied: bool  # through the egress proxy


class Http1Client:
    """POSTs over pooled keep-alive HTTP/1.1 connections (see the module's docstring)."""

    def __init__(
        self,
        *,
        timeout: float,
        allowed: Sequence[Network],
        max_connections: int,
        headers: Mapping[str, str] | None = None,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        excerpt_bytes: int = 0,
        proxy: EgressProxy | None = None,
        direct_urls: Collection[str] = (),
    ) -> None:
        """`headers` go into every request; each Response keeps the first `excerpt_bytes`
        bytes of its body. `proxy`: every connection through it (see the module's
        docstring) but to `direct_urls` (exactly these strings: `serve`'s own demo
        receiver, which a proxy elsewhere could not reach)."""
        self.timeout = timeout
        self.allowed = tuple(allowed)
        self.limit = max(1, max_connections)
        self.excerpt_bytes = excerpt_bytes
        self._fixed = header_lines((headers or {}).items())
        self._resolver = resolver
        self._ssl = ssl_context
        self.proxy = proxy
        self._direct = frozenset(direct_urls)
        self._proxy_auth = b""
        if proxy is not None and proxy.authorization is not None:
            self._proxy_auth = header_lines([("Proxy-Authorization", proxy.authorization)])
        self._routes: dict[str, _Route] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._live: set[_Connection] = set()
        self._opening = 0
        self._idle: dict[Key, list[_Connection]] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        return len(self._live) + self._opening

    async def post(
        self,
        url: str,
        headers: bytes,
        body: bytes,
        send_by: float | None = None,
        time_limit: float | None = None,
        tls: Tls | None = None,
    ) -> Response:
        """POST `body` to `url` with `headers` (complete `Name: value\\r\\n` lines). With
        `send_by` (loop time), raise TooLate instead of writing the request after it: the
        last moment is once a connection is ready, so that connecting counts too. `time_limit`:
        this request's total timeout instead of the client's (an endpoint's own). `tls`: the
        endpoint's own context and pool (https only), instead of the shared ones."""
        route = self._routes.get(url) or self._route(url)
        key, context = route.key, None
        if tls is not None and route.tls:
            key, context = (*key[:3], tls.pool), tls.context
        request = b"%bContent-Length: %d\r\n%b\r\n%b" % (route.head, len(body), headers, body)
        deadline = asyncio.get_running_loop().time() + (time_limit or self.timeout)
        conn = self._take_idle(key)
        if conn is not None:
            self._in_time(conn, send_by)
            try:
                return await self._exchange(conn, request, deadline)
            except _Stale:
                pass  # closed by the server while idle: once more, on a new connection
        async with asyncio.timeout_at(deadline):
            conn = await self._acquire(route, key, context, reuse=conn is None)
        self._in_time(conn, send_by)
        return await self._exchange(conn, request, deadline)

    def _in_time(self, conn: _Connection, send_by: float | None) -> None:
        """Raise TooLate, the connection back with the idle ones, when `send_by` has passed."""
        if send_by is not None and asyncio.get_running_loop().time() > send_by:
            self._release(conn)
            raise TooLate

    async def close(self) -> None:
        """Drop every connection; requests still waiting for one fail."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self._live):
            conn.close(abort=True)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RequestFailed(UNEXPECTED))
        self._dns.clear()

    # -- requests ---------------------------------------------------------------------------

    def _route(self, url: str) -> _Route:
        target = parse_webhook_url(url)
        parsed = URL(url)  # the request target and Host exactly as aiohttp sends them
        host = str(target.ip) if target.ip is not None else target.host
        head = b"POST %b HTTP/1.1\r\nHost: %b\r\n%b" % (
            parsed.raw_path_qs.encode("ascii"),
            (parsed.host_port_subcomponent or host).encode("ascii"),
            self._fixed,
        )
        proxied = self.proxy is not None and url not in self._direct
        if proxied and target.scheme == "http":
            head += self._proxy_auth  # absolute-form: each request is the proxy's to read
        # (A direct connection beside proxied ones is pooled apart from them.)
        scheme = target.scheme if proxied or self.proxy is None else f"direct+{target.scheme}"
        key = (scheme, host, target.port, "")
        route = _Route(
            key, host, target.ip is not None, target.port, target.scheme == "https", head, proxied
        )
        if len(self._routes) >= _MAX_CACHED:
            self._routes.clear()
        self._routes[url] = route
        return route

    async def _exchange(self, conn: _Connection, request: bytes, deadline: float) -> Response:
        """Send the request and read the answer by `deadline` (a timer on the answer's future:
        far cheaper than an `asyncio.timeout` per request)."""
        reply = conn.begin()
        timer = asyncio.get_running_loop().call_at(deadline, conn.expire, reply)
        if conn.authority is not None:  # through the proxy: `POST /…` → `POST http://a:p/…`
            request = b"POST http://%b%b" % (conn.authority, request[5:])
        try:
            conn.transport.write(request)
            response = await reply
        except BaseException:  # timeout, cancellation, a failure: the connection is unusable
            conn.abandon(reply)
            raise
        finally:
            timer.cancel()
        return response

    # -- the pool ---------------------------------------------------------------------------

    def _take_idle(self, key: Key) -> _Connection | None:
        """The most recently used idle connection to `key`, if any (one whose transport
        is already closing, its loss not reported yet, is dropped)."""
        conns = self._idle.get(key)
        while conns:
            conn = conns.pop()
            if not conns:
                del self._idle[key]
            conn.idle = False
            if not conn.transport.is_closing():
                return conn
            conn.close(abort=True)
        return None

    async def _acquire(
        self, route: _Route, key: Key, context: ssl.SSLContext | None, *, reuse: bool
    ) -> _Connection:
        """A new connection to `key` once there is room (with `context`, an endpoint's own),
        or an idle one that came back meanwhile (when `reuse`)."""
        while True:
            if self._closed:
                raise RequestFailed(UNEXPECTED)
            if reuse:
                conn = self._take_idle(key)
                if conn is not None:
                    return conn
            if self.open_connections < self.limit:
                return await self._open(route, key, context)
            if self._idle:  # an idle connection elsewhere gives way
                other = self._idle[next(iter(self._idle))][0]
                other.close()
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, but leaving: pass the turn on
                raise

    def _release(self, conn: _Connection) -> None:
        """A connection whose answer was read completely waits for the next request."""
        conn.idle = True
        conn.idle_at = time.monotonic()
        conns = self._idle.get(conn.key)
        if conns is None:
            self._idle[conn.key] = [conn]
        else:
            conns.append(conn)
        if self._waiters:
            self._wake()
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._sweep)

    def _forget(self, conn: _Connection) -> None:
        """A connection closed (by either side): its room goes to whoever waits."""
        self._live.discard(conn)
        if conn.idle:
            conn.idle = False
            conns = self._idle[conn.key]
            conns.remove(conn)
            if not conns:
                del self._idle[conn.key]
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close connections idle for IDLE_SECONDS (servers keep fewer sockets for us)."""
        self._sweeper = None
        cutoff = time.monotonic() - IDLE_SECONDS
        for conns in list(self._idle.values()):
            for conn in [c for c in conns if c.idle_at <= cutoff]:
                conn.close()
        if self._idle:
            self._sweeper = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._sweep)

    # -- connecting -------------------------------------------------------------------------

    async def _open(self, route: _Route, key: Key, context: ssl.SSLContext | None) -> _Connection:
        self._opening += 1
        try:
            if route.literal:
                addresses = [route.host]
            else:
                addresses = await self._resolve(route.host, route.port)
            if self.proxy is None or not route.proxied:
                conn = await self._connect(route, addresses, key, context)
            else:
                conn = await self._through_proxy(route, self.proxy, addresses, key, context)
        except BaseException:
            self._opening -= 1
            self._wake()
            raise
        self._opening -= 1  # counted in _live from connection_made on
        return conn

    async def _resolve(self, host: str, port: int) -> list[str]:
        """The addresses of `host` the guard allows, in the order of the lookup."""
        loop = asyncio.get_running_loop()
        cached = self._dns.get((host, port))
        if cached is not None and cached[0] > loop.time():
            return cached[1]
        try:
            if self._resolver is not None:
                answers = await self._resolver.resolve(host, port, socket.AF_UNSPEC)
                found = [str(answer["host"]) for answer in answers]
            else:
                infos = await loop.getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG
                )
                found = [str(info[4][0]) for info in infos]
        except OSError:
            raise RequestFailed(DNS_FAILED) from None
        allowed: list[str] = []
        reasons: list[str] = []
        for address in dict.fromkeys(found):
            try:
                reason = blocked_reason(ipaddress.ip_address(address), self.allowed)
            except ValueError:
                continue  # not an address: nothing to connect to
            if reason is None:
                allowed.append(address)
            else:
                reasons.append(reason)
        if not allowed:
            if reasons:
                raise BlockedAddress(reasons[0])
            raise RequestFailed(DNS_FAILED)
        if len(self._dns) >= _MAX_CACHED:
            self._dns.clear()
        self._dns[(host, port)] = (loop.time() + DNS_TTL_SECONDS, allowed)
        return allowed

    async def _connect(
        self,
        route: _Route,
        addresses: list[str],
        key: Key | None = None,
        own: ssl.SSLContext | None = None,
    ) -> _Connection:
        """A connection to one of `addresses` (all allowed by the guard, and only these are
        ever connected to), raced as RFC 8305 says (aiohappyeyeballs): the next address is
        tried when the one before has not connected within HAPPY_EYEBALLS_DELAY, so an
        address that black-holes the connection does not eat the whole timeout. A TLS
        handshake that fails on one address is tried on the others. When none connects, the
        most telling failure: a TLS one, else `connection refused` when every address
        refused, else a plain one."""
        loop = asyncio.get_running_loop()
        context = (own or self._tls()) if route.tls else None
        key = key or route.key
        failures: list[str] = []
        left = [_addr_info(address, route.port) for address in addresses]
        while left:
            try:
                sock = await aiohappyeyeballs.start_connection(
                    left, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY, interleave=1
                )
            except OSError as exc:
                refused = isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED
                failures.append(REFUSED if refused else CONNECT_FAILED)
                break
            except RuntimeError:  # uvloop's way to say that a connect failed
                failures.append(CONNECT_FAILED)
                break
            peer = sock.getpeername()[0]
            try:
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, key),
                    sock=sock,
                    ssl=context,
                    server_hostname=route.host if context is not None else None,
                )
            except BaseException as exc:
                sock.close()
                if isinstance(exc, ssl.SSLCertVerificationError):
                    failures.append(CERTIFICATE)
                elif isinstance(exc, ssl.SSLError):
                    failures.append(_tls_failure(exc))
                elif isinstance(exc, OSError):
                    failures.append(CONNECT_FAILED)
                else:
                    raise
                left = [info for info in left if info[4][0] != peer]
            else:
                return conn
        for failure in (CERTIFICATE, NO_CLIENT_CERTIFICATE, CLIENT_CERTIFICATE_REFUSED, HANDSHAKE,
                        CONNECT_FAILED):  # fmt: skip
            if failure in failures:
                raise RequestFailed(failure)
        raise RequestFailed(REFUSED)

    async def _through_proxy(
        self,
        route: _Route,
        proxy: EgressProxy,
        addresses: list[str],
        key: Key | None = None,
        own: ssl.SSLContext | None = None,
    ) -> _Connection:
        """A connection through the proxy to the first of `addresses` (checked by the guard:
        the proxy is asked for that address, never for the name; domain/proxy.py); with `own`,
        an endpoint's own TLS context (mutual TLS) inside the tunnel, pooled under `key`."""
        # A literal address was judged by the sender already (which may exempt it).
        target = proxy_target(addresses, route.port, _ANY if route.literal else self.allowed)
        if not isinstance(target, ProxyTarget):  # (the lookup judged them already)
            raise BlockedAddress(target.reason) if target.reason else RequestFailed(DNS_FAILED)
        loop = asyncio.get_running_loop()
        sock = await self._proxy_socket(proxy)
        try:
            if route.tls:
                await self._tunnel(sock, target.authority.encode("ascii"))
            context = (own or self._tls()) if route.tls else None
            try:
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, key or route.key),
                    sock=sock,
                    ssl=context,
                    server_hostname=route.host if context is not None else None,
                )
            except ssl.SSLCertVerificationError:
                raise RequestFailed(CERTIFICATE) from None
            except ssl.SSLError:
                raise RequestFailed(HANDSHAKE) from None
            except OSError:
                raise RequestFailed(CONNECT_FAILED) from None
        except BaseException:
            sock.close()
            raise
        if not route.tls:
            conn.authority = target.authority.encode("ascii")
        return conn

    async def _proxy_socket(self, proxy: EgressProxy) -> socket.socket:
        """A socket connected to the proxy (its address is the operator's: not judged)."""
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM)
        except OSError:
            raise ProxyFailed(f"{PROXY_ERROR}: {DNS_FAILED}") from None
        try:
            return await aiohappyeyeballs.start_connection(
                infos, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY, interleave=1
            )
        except OSError as exc:
            refused = isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED
            raise ProxyFailed(f"{PROXY_ERROR}: {REFUSED if refused else CONNECT_FAILED}") from None
        except RuntimeError:  # uvloop's way to say that a connect failed
            raise ProxyFailed(f"{PROXY_ERROR}: {CONNECT_FAILED}") from None

    async def _tunnel(self, sock: socket.socket, authority: bytes) -> None:
        """Ask the proxy on `sock` for a tunnel to `authority`; ProxyFailed unless a 2xx."""
        loop = asyncio.get_running_loop()
        request = b"CONNECT %b HTTP/1.1\r\nHost: %b\r\n%b\r\n" % (
            authority,
            authority,
            self._proxy_auth,
        )
        closed = ProxyFailed(f"{PROXY_ERROR}: CONNECT failed: {CLOSED}")
        try:
            await loop.sock_sendall(sock, request)
            head = b""
            # Nothing follows the head before we speak: the receiver's TLS waits for our hello.
            while b"\r\n\r\n" not in head:
                data = await loop.sock_recv(sock, 4096)
                if not data:
                    raise closed
                head += data
                if len(head) > MAX_HEAD_BYTES:
                    raise ProxyFailed(f"{PROXY_ERROR}: CONNECT failed: {INVALID}")
        except OSError:
            raise closed from None
        head, _, rest = head.partition(b"\r\n\r\n")
        try:
            status, _ = _status_line(head.split(b"\r\n", 1)[0])
        except RequestFailed:
            raise ProxyFailed(f"{PROXY_ERROR}: CONNECT failed: {INVALID}") from None
        if status == 407:
            raise ProxyFailed(f"{PROXY_ERROR}: HTTP 407")
        if not 200 <= status < 300:
            raise ProxyFailed(f"{PROXY_ERROR}: CONNECT failed: HTTP {status}")
        if rest:
            raise ProxyFailed(f"{PROXY_ERROR}: CONNECT failed: {INVALID}")

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl


class _Connection(asyncio.Protocol):
    """One connection, and the parser of the answer to the request it carries."""

    __slots__ = (
        "authority",
        "buffer",
        "client",
        "closed",
        "excerpt",
        "got_bytes",
        "idle",
        "idle_at",
        "keep_alive",
        "key",
        "left",
        "read",
        "reply",
        "retry_after",
        "state",
        "status",
        "transport",
    )

    def __init__(self, client: Http1Client, key: Key) -> None:
        self.client = client
        self.key = key
        self.transport = cast(asyncio.Transport, None)  # set by connection_made
        self.closed = False
        self.idle = False
        self.idle_at = 0.0
        self.reply: asyncio.Future[Response] | None = None
        self.buffer = bytearray()  # a head or a line not complete yet
        self.state = _HEAD
        self.got_bytes = False
        self.status = 0
        self.retry_after: str | None = None
        self.keep_alive = True
        self.left = 0  # bytes of the body (or of the chunk) still to come
        self.read = 0  # bytes of the body read
        self.excerpt = bytearray()  # its first `client.excerpt_bytes` bytes
        # Through the egress proxy in absolute-form: the checked `address:port` asked for.
        self.authority: bytes | None = None

    def begin(self) -> asyncio.Future[Response]:
        self.reply = reply = asyncio.get_running_loop().create_future()
        self.state = _HEAD
        self.got_bytes = False
        self.read = 0
        self.excerpt.clear()
        self.retry_after = None
        return reply

    def expire(self, reply: asyncio.Future[Response]) -> None:
        """The request's deadline passed before its answer was read."""
        if self.reply is reply:
            self._fail(TimeoutError())

    def abandon(self, reply: asyncio.Future[Response]) -> None:
        """The request gave up on its answer: the connection cannot carry another one."""
        if self.reply is reply:
            self.reply = None
            self.close(abort=True)

    def close(self, abort: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if abort:
            self.transport.abort()
        else:
            self.transport.close()
        self.client._forget(self)

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.client._live.add(self)

    def data_received(self, data: bytes) -> None:
        if self.reply is None:  # bytes nobody asked for: the stream is out of step
            self.close(abort=True)
            return
        self.got_bytes = True
        try:
            self._feed(data)
        except Exception as exc:  # RequestFailed, or a bug: the request's failure either way
            self._fail(exc)

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.client._forget(self)
        self._ended(exc)

    # -- reading the answer -----------------------------------------------------------------

    def _ended(self, exc: Exception | None) -> None:
        """The server closed (or reset) the connection: the end of a body read until close,
        else a failed request."""
        if self.reply is None:
            return
        if self.state == _UNTIL_CLOSE and exc is None:
            self.state = _DONE
            self._finish(reusable=False)
        elif self.state == _HEAD and isinstance(exc, ssl.SSLError):
            # TLS 1.3: a receiver refuses a client certificate (or its absence) after the
            # handshake, with an alert in place of the answer.
            self._fail(RequestFailed(_tls_failure(exc)))
        elif self.state == _HEAD:
            self._fail(RequestFailed(CLOSED) if self.got_bytes else _Stale(CLOSED))
        else:
            self._fail(RequestFailed(INTERRUPTED))

    def _fail(self, exc: BaseException) -> None:
        reply, self.reply = self.reply, None
        self.close(abort=True)
        if reply is not None and not reply.done():
            reply.set_exception(exc)

    def _finish(self, *, reusable: bool) -> None:
        reply, self.reply = self.reply, None
        assert reply is not None
        if reusable and not reply.done():
            self.client._release(self)
        else:
            self.close(abort=self.state == _CUT)
        if not reply.done():
            reply.set_result(Response(self.status, self.retry_after, bytes(self.excerpt)))

    def _feed(self, data: bytes) -> None:
        while data:
            state = self.state
            if state == _HEAD:
                data = self._read_head(data)
            elif state == _LENGTH:
                data = self._read_length(data)
            elif state == _UNTIL_CLOSE:
                data = self._body(data)
            else:
                data = self._read_chunked(data)
            if self.state >= _DONE:
                break
        if self.state == _DONE:
            # Bytes after the answer: the server is out of step with us; do not reuse.
            self._finish(reusable=self.keep_alive and not data)
        elif self.state == _CUT:
            self._finish(reusable=False)

    def _read_head(self, data: bytes) -> bytes:
        buffer = self.buffer
        searched = 0
        if buffer:
            searched = max(len(buffer) - 3, 0)
            buffer += data
            data = bytes(buffer)
            buffer.clear()
        end = data.find(b"\r\n\r\n", searched)
        start = end + 4
        bare = data.find(b"\n\n", searched, end if end >= 0 else len(data))
        if bare >= 0:  # lines ended by a bare LF, as some servers do
            end, start = bare, bare + 2
        if end < 0:
            if len(data) > MAX_HEAD_BYTES:
                raise RequestFailed(INVALID)
            buffer += data
            return b""
        if end > MAX_HEAD_BYTES:
            raise RequestFailed(INVALID)
        self._parse_head(data[:end])
        return data[start:]

    def _parse_head(self, head: bytes) -> None:
        lines = head.replace(b"\r\n", b"\n").split(b"\n")
        status, keep_alive = _status_line(lines[0])
        fields = _headers(lines, keep_alive)
        if status < 200:  # 100 Continue, 103 Early Hints: the answer follows
            self.state = _HEAD
            return
        if self.authority is not None and _made_by_proxy(status, lines):
            raise ProxyFailed(f"{PROXY_ERROR}: HTTP {status}")
        length = fields.length
        self.status = status
        self.retry_after = fields.retry_after
        self.keep_alive = fields.keep_alive and not (fields.encoded and length is not None)
        if status in (204, 304):
            self.state = _DONE
        elif fields.chunked:
            self.state = _CHUNK_SIZE
        elif fields.encoded or length is None:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False
        elif length == 0:
            self.state = _DONE
        else:
            self.left = length
            self.state = _LENGTH

    def _read_length(self, data: bytes) -> bytes:
        return self._read_sized(data, _DONE)

    def _read_sized(self, data: bytes, then: int) -> bytes:
        """The `left` bytes of a body of known size (the whole body, or one chunk), then on
        to state `then`; returns what follows them."""
        if len(data) < self.left:
            self.left -= len(data)
            return self._body(data)
        rest = data[self.left :]
        self._body(data[: self.left])
        self.left = 0
        if self.state != _CUT:
            self.state = then
        return rest

    def _body(self, data: bytes) -> bytes:
        """Body bytes: the first `excerpt_bytes` kept for the attempt log, all counted."""
        room = self.client.excerpt_bytes - len(self.excerpt)
        if room > 0:
            self.excerpt += data[:room]
        return self._count(len(data))

    def _count(self, size: int) -> bytes:
        """Bytes of the answer after its head are counted; beyond MAX_BODY_BYTES it is cut."""
        self.read += size
        if self.read > MAX_BODY_BYTES:
            self.state = _CUT
        return b""

    def _read_chunked(self, data: bytes) -> bytes:
        if self.state == _CHUNK_DATA:
            return self._read_sized(data, _CHUNK_END)
        line, rest = self._line(data)
        if line is None:
            return b""
        if self.state == _CHUNK_SIZE:
            size = line.split(b";", 1)[0].strip()
            if not size or len(size) > 16 or size.strip(_HEX):
                raise RequestFailed(INTERRUPTED)
            self.left = int(size, 16)
            self.state = _CHUNK_DATA if self.left else _TRAILER
        elif self.state == _CHUNK_END:
            if line:
                raise RequestFailed(INTERRUPTED)
            self.state = _CHUNK_SIZE
        elif not line:  # the empty line after the trailer fields
            self.state = _DONE
        else:
            self._count(len(line))
        return rest

    def _line(self, data: bytes) -> tuple[bytes | None, bytes]:
        """The next line (without its line end) and what follows, or None when incomplete."""
        end = data.find(b"\n")
        if end < 0:
            self.buffer += data
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise RequestFailed(INTERRUPTED)
            return None, b""
        line = data[:end]
        if self.buffer:
            line = bytes(self.buffer) + line
            self.buffer.clear()
        return (line[:-1] if line.endswith(b"\r") else line), data[end + 1 :]


def _tls_failure(exc: ssl.SSLError) -> str:
    """The words for a TLS failure other than our verifying the receiver's certificate: what
    the receiver's alert says about the client certificate, when it does."""
    reason = str(exc.reason or "")
    if "CERTIFICATE_REQUIRED" in reason:
        return NO_CLIENT_CERTIFICATE
    if "ALERT" in reason and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason):
        return CLIENT_CERTIFICATE_REFUSED
    return HANDSHAKE


def _addr_info(address: str, port: int) -> aiohappyeyeballs.AddrInfoType:
    """What `getaddrinfo` would give for an address already looked up and judged."""
    if ":" in address:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))


def _status_line(line: bytes) -> tuple[int, bool]:
    """(status, keep-alive unless a header says otherwise) of `HTTP/1.1 200 OK`."""
    if (
        len(line) < 12
        or not line.startswith(b"HTTP/1.")
        or line[7] not in b"01"
        or line[8] != 0x20
        or not line[9:12].isdigit()
        or line[9] == 0x30  # 0xx
        or (len(line) > 12 and line[12] != 0x20)
    ):
        raise RequestFailed(INVALID)
    return int(line[9:12]), line[7] == 0x31  # HTTP/1.0: close unless asked to keep alive


# Headers by which a proxy says that it made an error answer itself: RFC 9209's Proxy-Status
# (with an `error` parameter), Squid's and smokescreen's own.
_PROXY_ERROR_HEADERS = (b"x-squid-error", b"x-smokescreen-error")


def _made_by_proxy(status: int, lines: list[bytes]) -> bool:
    """Whether an answer to an absolute-form request was made by the proxy, not relayed from
    the receiver: a 407 always; an error that a proxy header says is its own; a 5xx without
    `Via` (a proxy adds Via to what it relays, as tinyproxy and Squid do, but not to its own
    error pages)."""
    if status == 407:
        return True
    if status < 400:
        return False
    via = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name in _PROXY_ERROR_HEADERS:
            return True
        if name == b"proxy-status" and b"error=" in value.lower():
            return True
        via = via or name == b"via"
    return status >= 500 and not via


_ANY = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))


class _Headers(NamedTuple):
    """What the answer's header lines say about its body and the connection."""

    length: int | None
    chunked: bool
    encoded: bool  # any Transfer-Encoding
    keep_alive: bool
    retry_after: str | None


def _headers(lines: list[bytes], keep_alive: bool) -> _Headers:
    """The header lines (after the status line) read for what the client needs."""
    length: int | None = None
    chunked = encoded = False
    retry_after: str | None = None
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            if line[:1] in (b" ", b"\t"):
                continue  # an obsolete folded continuation line: nothing we read
            raise RequestFailed(INVALID)
        name = name.rstrip().lower()
        if name == b"content-length":
            value = value.strip()
            if not value.isdigit() or (length is not None and int(value) != length):
                raise RequestFailed(INVALID)
            length = int(value)
        elif name == b"transfer-encoding":
            encoded = True
            chunked = value.rsplit(b",", 1)[-1].strip().lower() == b"chunked"
        elif name == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            if b"close" in tokens:
                keep_alive = False
            elif b"keep-alive" in tokens:
                keep_alive = True
        elif name == b"retry-after" and retry_after is None:
            retry_after = value.strip().decode("utf-8", "surrogateescape")
        elif not name:
            raise RequestFailed(INVALID)
    return _Headers(length, chunked, encoded, keep_alive, retry_after)
