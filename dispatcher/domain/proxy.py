"""The egress proxy (DISPATCHER_EGRESS_PROXY): its setting, and how the address guard applies.

Every attempt can be sent through one HTTP proxy: a CONNECT tunnel for `https` receivers, an
absolute-form request (`POST http://…`) for `http` ones. Operators use it to give receivers
a few static source addresses, or to put a filtering proxy (smokescreen style) in front.

How the guard applies (docs/configuration.md, "The egress proxy"): the proxy is *not* the
guard. The receiver's name is looked up and its addresses judged here, exactly as without a
proxy, and the proxy is asked for the checked address itself (`CONNECT 93.184.215.14:443`,
`POST http://93.184.215.14:80/…`), never for the name: so the proxy cannot resolve the name to
another address than the one judged (DNS rebinding between check and connect), and a proxy
with a wider reach than the sender (inside the operator's network) is never asked to reach
what the guard refuses. The name still travels where the receiver needs it: the TLS server
name (SNI) and certificate check and the `Host` header inside the tunnel. A proxy that
filters too (smokescreen) is compatible: it sees an address and applies its own rules on top.
The price: a plain-`http` receiver reached through a proxy sees `Host: <address>:<port>`
(the proxy replaces Host with the request target's authority, as RFC 9112 §3.2.2 asks), so
name-based virtual hosting needs `https`. The proxy's own address is the operator's setting
and is not judged.

The proxy's credentials (`http://user:password@host:port`) become a `Proxy-Authorization:
Basic` header sent to the proxy only (on the CONNECT, or on each absolute-form request,
never inside a tunnel); they are never logged (`EgressProxy.url` masks the password, the
repr leaves the header out) and never repeated in a start-up error.
"""

from __future__ import annotations

import base64
import ipaddress
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from dispatcher.domain.addresses import Network, blocked_reason

PROXY_SETTING = "DISPATCHER_EGRESS_PROXY"
# The words that start every error the proxy itself caused, in `lastError` and the attempt log.
PROXY_ERROR = "egress proxy"


@dataclass(frozen=True)
class EgressProxy:
    """Where the proxy is, and the header that authenticates to it (None: no credentials)."""

    host: str  # a name or an address (no brackets)
    port: int
    user: str | None = None
    authorization: str | None = field(default=None, repr=False)

    @property
    def secrets(self) -> list[str]:
        """What an answer's excerpt must never show (domain/redaction.py): the header's
        value, its base64 and the password, should a proxy pass them on and a receiver
        echo them."""
        if self.authorization is None:
            return []
        token = self.authorization.removeprefix("Basic ")
        password = base64.b64decode(token).decode().partition(":")[2]
        return [self.authorization, token, password]

    @property
    def url(self) -> str:
        """The proxy's URL as it may be logged: the password, if any, masked."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        credentials = f"{urllib.parse.quote(self.user, safe='')}:***@" if self.user else ""
        return f"http://{credentials}{host}:{self.port}"


def parse_egress_proxy(raw: str) -> EgressProxy:
    """The proxy of `http://[user:password@]host:port`, or ValueError saying what is wrong
    (the message never repeats the value: it may hold a password)."""
    try:
        parts = urllib.parse.urlsplit(raw.strip())
        port = parts.port
    except ValueError:
        raise ValueError("expected http://host:port (the port must be a number)") from None
    if parts.scheme.lower() != "http":
        raise ValueError(
            "expected http://host:port: the scheme must be http (the proxy is spoken to in "
            "plain HTTP; https receivers go through it in a CONNECT tunnel)"
        )
    if not parts.hostname:
        raise ValueError("expected http://host:port: the host is missing")
    if port is None or port == 0:
        raise ValueError("expected http://host:port: the port is missing")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("expected http://host:port with nothing after the port")
    authorization = None
    user = None
    if parts.username is not None or parts.password is not None:
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        if not all(" " <= char <= "~" for char in user + password):
            raise ValueError("the proxy's user and password must be printable ASCII")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        authorization = f"Basic {token}"
    return EgressProxy(parts.hostname, port, user, authorization)


class ProxyTarget(NamedTuple):
    """What the proxy is asked for: `authority` (the checked address and the port, as the
    CONNECT request target or the absolute-form URL's authority), and `address` alone."""

    address: str
    authority: str


class Refused(NamedTuple):
    """Every address of the name is refused by the guard: `reason` is the first one's."""

    reason: str | None  # None: the lookup gave no address at all


def proxy_target(
    addresses: Sequence[str], port: int, allowed: Sequence[Network] = ()
) -> ProxyTarget | Refused:
    """The guard's decision for a proxied attempt, given the addresses the receiver's name
    resolved to (or its literal address), in the lookup's order: the proxy is asked for
    the first address the guard allows, never for the name (see the module's docstring);
    when none is allowed, nothing is asked of the proxy."""
    reasons: list[str] = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            continue  # not an address: nothing to connect to
        reason = blocked_reason(address, allowed)
        if reason is None:
            host = f"[{address}]" if address.version == 6 else str(address)
            return ProxyTarget(str(address), f"{host}:{port}")
        reasons.append(reason)
    return Refused(reasons[0] if reasons else None)
