"""The outbound address guard's classification, as a pure function.

A webhook URL is user input: without this guard, a subscription to `http://169.254.169.254/`
or `http://10.0.0.5/admin` would let any API user probe the operator's network (SSRF).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The setting that opens networks to the guard, named in every refusal (the one place its
# words are made: `blocked_error`).
ALLOW_SETTING = "DISPATCHER_ALLOWED_CIDRS"

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def blocked_reason(address: IPAddress, allowed: Sequence[Network] = ()) -> str | None:
    """Why `address` must not be connected to, or None when it may be.

    Addresses inside an allowed network pass whatever they are. IPv6 forms that embed an IPv4
    address (mapped, NAT64, 6to4) are judged by the address they embed.
    """
    if any(address.version == net.version and address in net for net in allowed):
        return None
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return blocked_reason(embedded, allowed)
    if address.is_unspecified:
        return "unspecified address"
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local address"
    if address.is_multicast:
        return "multicast address"
    if address.version == 4 and address in _CGNAT:
        return "shared (CGNAT) address"
    if address.is_reserved:
        return "reserved address"
    if address.is_private:
        return "private address"
    if not address.is_global:
        return "reserved address"
    return None


def blocked_error(reason: str) -> str:
    """An attempt's `lastError` when the guard refused its address: the reason, and how to
    allow it (a receiver on localhost is the usual first surprise)."""
    return f"blocked: {reason} (set {ALLOW_SETTING} to allow it)"


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if address.version != 6:
        return None
    assert isinstance(address, ipaddress.IPv6Address)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None
