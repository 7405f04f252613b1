"""The outbound address guard: classification as a pure function, and the resolver end to end
with loopback targets only (a refused address is never connected to)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from dispatcher.domain.addresses import blocked_reason
from dispatcher.engine.http1 import BlockedAddress, Http1Client
from dispatcher.engine.sender import Sender
from tests.receiver import Receiver

ip = ipaddress.ip_address
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback address"),
        ("127.255.0.9", "loopback address"),
        ("::1", "loopback address"),
        ("10.1.2.3", "private address"),
        ("172.16.0.1", "private address"),
        ("172.31.255.255", "private address"),
        ("192.168.1.1", "private address"),
        ("fc00::1", "private address"),
        ("fd12:3456::1", "private address"),
        ("169.254.169.254", "link-local address"),
        ("169.254.0.1", "link-local address"),
        ("fe80::1", "link-local address"),
        ("100.64.0.1", "shared (CGNAT) address"),
        ("100.127.255.254", "shared (CGNAT) address"),
        ("224.0.0.1", "multicast address"),
        ("ff02::1", "multicast address"),
        ("0.0.0.0", "unspecified address"),
        ("::", "unspecified address"),
        ("240.0.0.1", "reserved address"),
        ("255.255.255.255", "reserved address"),
        ("192.0.2.1", "private address"),  # documentation range
        ("::ffff:10.0.0.1", "private address"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "link-local address"),
        ("64:ff9b::a00:1", "private address"),  # NAT64 of 10.0.0.1
        ("2002:a00:1::1", "private address"),  # 6to4 of 10.0.0.1
        ("2001:db8::1", "private address"),  # documentation
    ],
)
def test_refused_addresses(address: str, reason: str) -> None:
    assert blocked_reason(ip(address)) == reason


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert blocked_reason(ip(address)) is None


def test_allowlist_opens_only_its_ranges() -> None:
    allowed = (ipaddress.ip_network("10.20.0.0/16"), ipaddress.ip_network("::1/128"))
    assert blocked_reason(ip("10.20.3.4"), allowed) is None
    assert blocked_reason(ip("::1"), allowed) is None
    assert blocked_reason(ip("10.21.0.1"), allowed) == "private address"
    assert blocked_reason(ip("127.0.0.1"), allowed) == "loopback address"


class ScriptedResolver(AbstractResolver):
    """Answers from a script instead of DNS: one list of addresses per lookup."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.lookups = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answer = self.answers[min(self.lookups, len(self.answers) - 1)]
        self.lookups += 1
        return [
            ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET, proto=0, flags=0)
            for a in answer
        ]

    async def close(self) -> None:
        pass


async def test_a_lookup_drops_refused_answers() -> None:
    """The sender's client keeps only the allowed addresses of a lookup, and refuses a name
    that has none."""
    mixed = ScriptedResolver(["10.0.0.5", "127.0.0.1"])
    guarded = Http1Client(timeout=2, allowed=LOOPBACK, max_connections=1, resolver=mixed)
    assert await guarded._resolve("hooks.test", 80) == ["127.0.0.1"]
    private = ScriptedResolver(["10.0.0.5", "169.254.169.254"])
    only_private = Http1Client(timeout=2, allowed=LOOPBACK, max_connections=1, resolver=private)
    with pytest.raises(BlockedAddress, match="private address"):
        await only_private._resolve("hooks.test", 80)


async def send(sender: Sender, url: str) -> Any:
    return await sender.send(url, "WD1", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], b"{}")


async def test_names_resolving_to_private_addresses_are_refused(receiver: Receiver) -> None:
    sender = Sender(timeout=2, allowed=LOOPBACK, max_connections=10,
                    resolver=ScriptedResolver(["10.9.8.7"]))  # fmt: skip
    await sender.start()
    try:
        outcome = await send(sender, f"http://internal.test:{receiver.port}/hook")
    finally:
        await sender.close()
    assert outcome.kind == "blocked"
    assert outcome.error == "blocked: private address (set DISPATCHER_ALLOWED_CIDRS to allow it)"


async def test_a_name_that_changes_its_answer_is_judged_at_connect(receiver: Receiver) -> None:
    """Rebinding: first loopback (allowed here), then a private address. The guard runs on
    the lookup the connection uses, so the second request is refused, never sent."""
    resolver = ScriptedResolver(["127.0.0.1"], ["10.0.0.5"])
    sender = Sender(timeout=2, allowed=LOOPBACK, max_connections=10, resolver=resolver)
    await sender.start()
    try:
        first = await send(sender, f"http://flip.test:{receiver.port}/hook")
        # A new pool: no cached lookup, no reused keep-alive connection either.
        await sender.close()
        await sender.start()
        second = await send(sender, f"http://flip.test:{receiver.port}/hook")
    finally:
        await sender.close()
    assert first.kind == "success"
    assert (
        second.kind == "blocked"
        and second.error == "blocked: private address (set DISPATCHER_ALLOWED_CIDRS to allow it)"
    )
    assert len(receiver.requests) == 1


async def test_literal_addresses_and_ipv6_forms_are_refused_before_connecting() -> None:
    sender = Sender(timeout=2, allowed=(), max_connections=10)
    await sender.start()
    try:
        for url in ("http://127.0.0.1:9/", "http://[::1]:9/", "http://[::ffff:127.0.0.1]:9/",
                    "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/"):  # fmt: skip
            outcome = await send(sender, url)
            assert outcome.kind == "blocked", url
            assert outcome.error is not None and outcome.error.startswith("blocked: ")
    finally:
        await sender.close()
