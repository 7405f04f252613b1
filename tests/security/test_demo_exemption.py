"""The one hole in the outbound address guard: `serve`'s own demo receiver. Exactly its URL
passes; every other loopback URL (another path, port, spelling, or the same URL by name) is
refused as before, with the refusal saying how to allow local receivers."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain.addresses import blocked_error
from dispatcher.engine.sender import Sender
from tests.receiver import Receiver

HINT = " (set DISPATCHER_ALLOWED_CIDRS to allow it)"


async def send(sender: Sender, url: str) -> Any:
    return await sender.send(url, "WD1", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], b"{}")


def test_the_refusal_names_the_setting_that_allows_it() -> None:
    assert blocked_error("loopback address") == "blocked: loopback address" + HINT


async def test_only_the_exempt_url_passes(receiver: Receiver) -> None:
    exempt = receiver.url("/demo/receiver")
    sender = Sender(timeout=2, allowed=(), max_connections=10, exempt_urls=[exempt])
    await sender.start()
    try:
        passed = await send(sender, exempt)
        assert (passed.kind, passed.status) == ("success", 200)
        others = [
            receiver.url("/hook"),
            receiver.url("/demo/receiver/"),
            receiver.url("/demo/receiver?x=1"),
            receiver.url("/demo/receiver#x"),
            receiver.url("/demo/Receiver"),
            f"http://127.0.0.1:{receiver.port + 1}/demo/receiver",
            f"http://127.0.0.2:{receiver.port}/demo/receiver",
            f"http://[::ffff:127.0.0.1]:{receiver.port}/demo/receiver",
            f"https://127.0.0.1:{receiver.port}/demo/receiver",
        ]
        for url in others:
            outcome = await send(sender, url)
            assert outcome.kind == "blocked", url
            assert outcome.error == "blocked: loopback address" + HINT, url
        # By name, the lookup is judged (never exempt): localhost is refused too.
        named = await send(sender, f"http://localhost:{receiver.port}/demo/receiver")
        assert named.kind == "blocked" and named.error.endswith(HINT)
    finally:
        await sender.close()
    assert [r.path for r in receiver.requests] == ["/demo/receiver"]


async def test_without_exemption_the_demo_url_is_refused(receiver: Receiver) -> None:
    sender = Sender(timeout=2, allowed=(), max_connections=10)
    await sender.start()
    try:
        outcome = await send(sender, receiver.url("/demo/receiver"))
    finally:
        await sender.close()
    assert outcome.kind == "blocked" and receiver.requests == []


@pytest.mark.parametrize(
    "url", ["http://localhost:8080/demo/receiver", "http://demo.test/demo/receiver", "nonsense"]
)
def test_an_exemption_names_its_host_by_address(url: str) -> None:
    """A name could be made to point anywhere between check and connect: refused at once."""
    with pytest.raises(ValueError):
        Sender(timeout=2, allowed=(), max_connections=10, exempt_urls=[url])
