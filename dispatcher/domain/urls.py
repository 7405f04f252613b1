"""Webhook URLs: accepted only if the sender can attempt them.

One parser, used twice: by the API when a URL is created or changed (a 400 that says what is
wrong), and by the sender before every attempt (a URL stored before a rule existed fails as a
recorded attempt, never as an exception). The rules are those of the path a request takes:
the host is IDNA-encoded (as yarl does) and then looked up by name, so each label must be what
DNS and the IDNA codec take (RFC 1123 host names: letters, digits, hyphens; 1 to 63 characters
a label, not starting or ending with a hyphen; 253 in all; a label starting `xn--` the
ASCII form of a valid international label, IDNA 2008). Forms that different parsers read
differently are refused rather than guessed at: numeric hosts other than dotted-quad IPv4
(`2130706433`, `127.1`, `0x7f.0.0.1`, `0177.0.0.1`), credentials, backslashes, white space
and control characters anywhere.

Messages are plain words for the API's 400 and for the attempt's `lastError`: no codec,
exception or library names.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass

import idna

MAX_URL_LENGTH = 2048
MAX_HOST_LENGTH = 253
MAX_LABEL_LENGTH = 63

_LDH_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_PORT = re.compile(r"[0-9]{1,5}")
# Categories that make a character invisible or break a request line: controls (Cc), format
# characters such as zero-width space and bidi marks (Cf), and every kind of space.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


class InvalidUrl(ValueError):
    """The URL cannot be attempted; the message says why in plain words."""


@dataclass(frozen=True)
class Target:
    """Where a webhook URL sends: scheme, the host as looked up (A-labels), the port."""

    scheme: str
    host: str
    port: int
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None


def parse_webhook_url(url: str) -> Target:
    """The target of `url`, or InvalidUrl saying what is wrong."""
    if not url:
        raise InvalidUrl("must not be empty")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidUrl(f"must be at most {MAX_URL_LENGTH} characters")
    for char in url:
        if char.isspace() or unicodedata.category(char) in _REFUSED_CATEGORIES:
            raise InvalidUrl(
                "must not contain spaces, tabs, line breaks or other invisible or control "
                f"characters (found U+{ord(char):04X})"
            )
    if "\\" in url:
        raise InvalidUrl("must not contain a backslash")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise InvalidUrl("must be an absolute http:// or https:// URL")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        raise InvalidUrl("must not contain credentials (user:password@)")
    if not authority:
        raise InvalidUrl("must name a host")
    host_part, port_part = _split_port(authority)
    port = _port(port_part, default=443 if scheme == "https" else 80)
    if host_part.startswith("["):
        return Target(scheme, host_part, port, _ipv6(host_part))
    host = _host(host_part)
    ip = ipaddress.IPv4Address(host) if _looks_numeric(host) else None
    return Target(scheme, host, port, ip)


def check_webhook_url(url: str) -> str:
    """`url` unchanged when it can be attempted (a validator for request models)."""
    parse_webhook_url(url)
    return url


def _split_port(authority: str) -> tuple[str, str | None]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise InvalidUrl("the IPv6 address must be closed with ]")
        host, after = authority[: end + 1], authority[end + 1 :]
        if not after:
            return host, None
        if not after.startswith(":"):
            raise InvalidUrl("only a port may follow the IPv6 address")
        return host, after[1:]
    host, colon, port = authority.partition(":")
    return host, (port if colon else None)


def _port(raw: str | None, default: int) -> int:
    if raw is None:
        return default
    if not _PORT.fullmatch(raw) or not 1 <= int(raw) <= 65535:
        raise InvalidUrl("the port must be a number from 1 to 65535 (or leave out the colon)")
    return int(raw)


def _ipv6(bracketed: str) -> ipaddress.IPv6Address:
    inner = bracketed[1:-1]
    if "%" in inner:
        raise InvalidUrl("the IPv6 address must not carry a zone (%)")
    try:
        return ipaddress.IPv6Address(inner)
    except ValueError:
        raise InvalidUrl("the IPv6 address is not valid") from None


def _host(raw: str) -> str:
    """The host as it will be looked up: lower case, international labels as A-labels."""
    if not raw:
        raise InvalidUrl("must name a host")
    host = raw.lower() if raw.isascii() else _idna_encode(raw)
    labels = host.split(".")
    if any(label == "" for label in labels):
        raise InvalidUrl(
            "the host name has an empty label (a dot at the start or the end, or two dots in a row)"
        )
    if len(host) > MAX_HOST_LENGTH:
        raise InvalidUrl(f"the host name must be at most {MAX_HOST_LENGTH} characters")
    if _looks_numeric(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise InvalidUrl(
                "the host looks like an IPv4 address but is not in dotted form with four "
                "decimal parts and no leading zeros (like 192.0.2.10)"
            ) from None
        return host
    for label in labels:
        if len(label) > MAX_LABEL_LENGTH:
            raise InvalidUrl(
                f"each part of the host name between dots must be at most {MAX_LABEL_LENGTH} "
                "characters"
            )
        if not _LDH_LABEL.fullmatch(label):
            if label.startswith("-") or label.endswith("-"):
                raise InvalidUrl("a part of the host name must not start or end with a hyphen")
            raise InvalidUrl("the host name may contain only letters, digits, hyphens and dots")
        if label.startswith(A_LABEL_PREFIX) and not _is_a_label(label):
            if not raw.isascii():  # made so from the name given (by the IDNA 2003 fallback)
                raise InvalidUrl(NOT_INTERNATIONAL)
            raise InvalidUrl(
                "a part of the host name that starts with xn-- must be the ASCII form of a "
                "valid international name (like xn--bcher-kva for bücher)"
            )
    return host


NOT_INTERNATIONAL = "the host name is not a valid international domain name"
# A label starting with this is the ASCII form (A-label) of an international one (RFC 5890).
A_LABEL_PREFIX = "xn--"


def _is_a_label(label: str) -> bool:
    """An `xn--` label must be the A-label of a valid U-label (IDNA 2008, as the idna package
    checks it: Punycode that decodes, to code points IDNA allows, in a valid label), and its
    canonical one: decoding, then encoding again, gives it back. Else two programs could
    read one host differently (or a resolver refuse what was accepted): `xn--a` decodes to
    U+0080, a control character."""
    try:
        return bool(idna.encode(idna.decode(label)).decode("ascii") == label)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False


def _idna_encode(host: str) -> str:
    """A-labels as yarl makes them for the request (UTS 46, else IDNA 2003)."""
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        pass
    try:
        return host.encode("idna").decode("ascii")
    except (UnicodeError, ValueError):
        raise InvalidUrl(NOT_INTERNATIONAL) from None


def _looks_numeric(host: str) -> bool:
    """A host that URL parsers read as an IPv4 address: its last label is a number (decimal
    or 0x hex). Such names are not host names (RFC 1123: a top label is not all digits)."""
    return _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]) is not None


# `parse_webhook_url`'s rules as one JSON Schema pattern (the OpenAPI document), for ASCII
# hosts: every URL it matches is accepted. International host names are accepted too (as
# their IDNA form), beyond the pattern: their rules (UTS 46) are not a regular expression.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_END_OF_HOST = r"(?:[:/?#]|$)"
_NOT_A_NUMBER = rf"(?![0-9]+{_END_OF_HOST})(?!0[xX][0-9A-Fa-f]*{_END_OF_HOST})"
_NAME = (
    rf"(?=[^:/?#]{{1,{MAX_HOST_LENGTH}}}{_END_OF_HOST})"
    rf"(?:(?![xX][nN]--){_LABEL}\.)*{_NOT_A_NUMBER}(?![xX][nN]--){_LABEL}"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join(
    (
        rf"(?:{_H16}:){{7}}{_H16}",
        rf"(?:{_H16}:){{1,7}}:",
        *(rf"(?:{_H16}:){{1,{6 - n}}}(?::{_H16}){{1,{n + 1}}}" for n in range(6)),
        rf":(?:(?::{_H16}){{1,7}}|:)",
    )
)
_PORT_NUMBER = (
    r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
)


def url_pattern(refused_class: str) -> str:
    """The pattern, given the class body of the characters refused anywhere (spaces,
    controls, format characters: domain/text.py spells classes out)."""
    return (
        rf"^[hH][tT][tT][pP][sS]?://(?:{_NAME}|{_IPV4}(?=[:/?#]|$)|\[(?:{_IPV6})\])"
        rf"(?::{_PORT_NUMBER})?(?:[/?#][^{refused_class}\\]*)?$"
    )
