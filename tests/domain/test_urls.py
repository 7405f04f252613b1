"""The webhook URL parser as a pure function: what the sender can attempt, and what not.

The API refuses and the sender records exactly these (one parser); the plain message is
what users read in the 400 and in `lastError`.
"""

from __future__ import annotations

import re

import pytest

from dispatcher.domain.urls import InvalidUrl, parse_webhook_url

# No codec, exception or library names in what users read.
TECHNICAL = re.compile(r"(?i)idna|codec|unicode(?:de|en)?codeerror|exception|error\b|yarl|aiohttp")

ACCEPTED = {
    "http://example.com/ok": ("example.com", 80),
    "https://example.com": ("example.com", 443),
    "HTTP://EXAMPLE.com:8080/a?b=c#d": ("example.com", 8080),
    "http://a-b.example.com/": ("a-b.example.com", 80),
    "http://127.0.0.1:9/x": ("127.0.0.1", 9),
    "http://[::1]:65535/x": ("[::1]", 65535),
    "http://bücher.de/x": ("xn--bcher-kva.de", 80),
    "http://xn--bcher-kva.de/": ("xn--bcher-kva.de", 80),
    "http://XN--BCHER-KVA.de/": ("xn--bcher-kva.de", 80),
    "http://xn--nxasmq6b.example/": ("xn--nxasmq6b.example", 80),
    "http://a.xn--fa-hia.de/": ("a.xn--fa-hia.de", 80),
    "http://faß.de/": ("xn--fa-hia.de", 80),
    # `--` at positions 3-4 without the xn prefix is no A-label (such hosts exist)
    "http://r3---sn-abc.example.com/": ("r3---sn-abc.example.com", 80),
    "http://" + "a" * 63 + ".com/": ("a" * 63 + ".com", 80),
    "http://localhost/ok/é": ("localhost", 80),
    "http://1.2.3.4/": ("1.2.3.4", 80),
    "http://a1.b2/": ("a1.b2", 80),
}

REFUSED = {
    # empty or oversized labels (the UnicodeError of the report)
    "http://a..b/ok": "empty label",
    "http://.a.b/ok": "empty label",
    "http://a.b./ok": "empty label",
    "http://" + "a" * 64 + ".com/ok": "at most 63",
    "http://" + ".".join(["a" * 60] * 5) + "/": "at most 253",
    # host names as RFC 1123 allows them
    "http://a_b.com/": "letters, digits, hyphens",
    "http://a%62.com/": "letters, digits, hyphens",
    "http://a!b.com/": "letters, digits, hyphens",
    "http://-a.com/": "hyphen",
    "http://a-.com/": "hyphen",
    "http://a.-b.com/": "hyphen",
    # labels starting xn-- that are not the A-label of a valid U-label (IDNA 2008)
    "http://xn--a/": "xn--",
    "http://xn--a.example.com/": "xn--",
    "http://a.xn--a.com/": "xn--",
    "http://XN--A.com/": "xn--",
    "http://xn--.com/": "hyphen",
    "http://xn--ls8h.la/": "xn--",  # an emoji: IDNA 2003 took it, IDNA 2008 does not
    "http://xn--zz.com/": "xn--",
    "http://xn--0.com/": "xn--",
    "http://xn--bcher-kva-.de/": "hyphen",
    "http://xn--99999999.com/": "xn--",
    "http://xn--ab-.com/": "hyphen",
    "http://💩.la/": "not a valid international",
    # ports
    "http://h:/x": "port",
    "http://h:0/x": "port",
    "http://h:65536/x": "port",
    "http://h:+80/x": "port",
    "http://h:8o/x": "port",
    "http://h:\u0668\u0660/x": "port",
    "http://h:\uff18\uff10/x": "port",
    "http://h:80:80/x": "port",
    "http://[::1]x/": "only a port",
    # white space and control characters anywhere
    "http://h/ok\r\nX-Injected: 1": "control",
    "http://h/ok\tx": "control",
    "http://h/ok ": "control",
    " http://h/ok": "control",
    "http://h/o k": "control",
    "http://h/ok\x00": "control",
    "http://h/ok\x7f": "control",
    "http://h\u200b.com/": "control",
    "http://h/\u2028": "control",
    "http://h/\u00a0": "control",
    # numeric hosts other than dotted-quad IPv4
    "http://2130706433/": "dotted form",
    "http://127.1/": "dotted form",
    "http://0x7f.0.0.1/": "dotted form",
    "http://0177.0.0.1/": "dotted form",
    "http://010.0.0.1/": "dotted form",
    "http://1.2.3.4.5/": "dotted form",
    "http://256.1.1.1/": "dotted form",
    "http://foo.123/": "dotted form",
    "http://0x7f000001/": "dotted form",
    # IPv6
    "http://[::1/": "closed",
    "http://[::g]/": "IPv6",
    "http://[fe80::1%25eth0]/": "zone",
    # everything else a sender cannot or must not attempt
    "ftp://example.com/": "http",
    "example.com/ok": "http",
    "//example.com/ok": "http",
    "http:/example.com": "http",
    "http://": "host",
    "http:///path": "host",
    "http://u:p@example.com/": "credentials",
    "http://u@example.com/": "credentials",
    "http://example.com\\@evil.com/": "backslash",
    "": "empty",
}


@pytest.mark.parametrize(("url", "expected"), list(ACCEPTED.items()))
def test_accepted(url: str, expected: tuple[str, int]) -> None:
    target = parse_webhook_url(url)
    assert (target.host, target.port) == expected


@pytest.mark.parametrize(("url", "words"), list(REFUSED.items()))
def test_refused_with_plain_words(url: str, words: str) -> None:
    with pytest.raises(InvalidUrl) as caught:
        parse_webhook_url(url)
    message = str(caught.value)
    assert words in message
    assert not TECHNICAL.search(message), message


def test_every_accepted_host_encodes_as_the_resolver_will() -> None:
    """What broke the sender: the stdlib codec the resolver uses must take every accepted
    host (labels 1..63, LDH)."""
    for url in ACCEPTED:
        host = parse_webhook_url(url).host.strip("[]")
        host.encode("idna")  # raises on what the sender could not look up
