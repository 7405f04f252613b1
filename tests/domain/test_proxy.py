"""How the address guard applies to the egress proxy, as a pure decision (domain/proxy.py):
the proxy is asked for the first address the guard allows, never for the name, and for
nothing when the guard refuses them all. And what a failure of the proxy itself means for
the endpoint (domain/outcomes.py): nothing."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest

from dispatcher.domain.enums import DisabledReason
from dispatcher.domain.outcomes import (
    AttemptOutcome,
    ClockChange,
    ClockEffect,
    GivenUp,
    GiveUpReason,
    RetryAt,
    ToDisable,
    decide,
    endpoints_to_disable,
    failure_clocks,
)
from dispatcher.domain.proxy import ProxyTarget, Refused, proxy_target
from dispatcher.domain.retry import RetryPolicy
from tests.records import attempt_result

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@pytest.mark.parametrize(
    ("addresses", "allowed", "decision"),
    [
        # A public address: asked for as such (the name never reaches the proxy).
        (["93.184.215.14"], (), ProxyTarget("93.184.215.14", "93.184.215.14:443")),
        # The first allowed one, in the lookup's order; refused ones are skipped.
        (["10.0.0.5", "8.8.8.8"], (), ProxyTarget("8.8.8.8", "8.8.8.8:443")),
        # IPv6 in brackets, as a CONNECT target and a URL authority write it.
        (["2001:db8::1", "2606:4700::1"], (), ProxyTarget("2606:4700::1", "[2606:4700::1]:443")),
        # Refused everywhere: the proxy is asked nothing; the first reason is told.
        (["169.254.169.254"], (), Refused("link-local address")),
        (["127.0.0.1", "10.1.2.3"], (), Refused("loopback address")),
        (["::ffff:10.0.0.1"], (), Refused("private address")),  # judged by what it embeds
        # DISPATCHER_ALLOWED_CIDRS opens a network, with a proxy as without.
        (["127.0.0.1"], LOOPBACK, ProxyTarget("127.0.0.1", "127.0.0.1:443")),
        # A lookup with no address at all.
        ([], (), Refused(None)),
        (["not-an-address"], (), Refused(None)),
    ],
)
def test_the_proxy_is_asked_for_a_checked_address_only(
    addresses: list[str], allowed: tuple[ipaddress.IPv4Network, ...], decision: object
) -> None:
    assert proxy_target(addresses, 443, allowed) == decision


# -- the proxy's failures are not charged to the endpoint (domain/outcomes.py) ---------------

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy((10.0,))
PROXY_FAILED = AttemptOutcome.CONNECTION_ERROR


def test_a_proxy_failure_follows_the_schedule_without_touching_the_endpoint() -> None:
    first = decide(PROXY_FAILED, None, attempts_made=1, policy=POLICY, now=NOW,
                   rand=lambda: 0.5, charged=False)  # fmt: skip
    assert first == RetryAt(NOW + timedelta(seconds=10), charged=False)
    assert first.failure_clock is ClockEffect.KEEP and first.disables is None
    last = decide(PROXY_FAILED, None, attempts_made=2, policy=POLICY, now=NOW, charged=False)
    assert last == GivenUp(GiveUpReason.EXHAUSTED, charged=False)
    assert last.failure_clock is ClockEffect.KEEP and last.disables is None
    # The same failure charged (the receiver's): the clock starts, a give-up may disable.
    charged = decide(PROXY_FAILED, None, attempts_made=2, policy=POLICY, now=NOW)
    assert charged.failure_clock is ClockEffect.START
    assert charged.disables is DisabledReason.FAILING


def test_a_batch_of_proxy_failures_neither_starts_a_clock_nor_disables() -> None:
    proxy_failed = [
        attempt_result("WH1", NOW, PROXY_FAILED, None,
                       decision=GivenUp(GiveUpReason.EXHAUSTED, charged=False)),
        attempt_result("WH1", NOW + timedelta(seconds=1), PROXY_FAILED, None,
                       decision=RetryAt(NOW, charged=False), delivery_id="WD2"),
    ]  # fmt: skip
    assert failure_clocks(proxy_failed) == {}
    assert endpoints_to_disable(proxy_failed) == ToDisable([], [])
    # Beside a failure of the receiver's, only that one counts.
    receiver_failed = attempt_result("WH1", NOW + timedelta(seconds=2), PROXY_FAILED, None,
                                     delivery_id="WD3")  # fmt: skip
    both = [*proxy_failed, receiver_failed]
    assert failure_clocks(both) == {"WH1": ClockChange(False, NOW + timedelta(seconds=2))}
    assert endpoints_to_disable(both) == ToDisable([], ["WH1"])
