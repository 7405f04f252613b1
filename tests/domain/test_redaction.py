"""The excerpt redaction, table-driven: every form an echo writes a secret in, a secret cut
off at the excerpt's end, and nothing else touched."""

from __future__ import annotations

import pytest

from dispatcher.domain.redaction import REDACTED, private_keys, redact, signing_values

SECRET = 'tok/en+v4l"ue'
R = REDACTED


@pytest.mark.parametrize(
    ("text", "cut_off", "expected"),
    [
        (f"Authorization: {SECRET}\n", False, f"Authorization: {R}\n"),
        ('{"a":"tok/en+v4l\\"ue"}', False, f'{{"a":"{R}"}}'),  # JSON-escaped
        ('{"a":"tok\\/en+v4l\\"ue"}', False, f'{{"a":"{R}"}}'),  # slashes escaped too
        ("a=tok%2Fen%2Bv4l%22ue&b=1", False, f"a={R}&b=1"),  # percent-encoded
        (f"{SECRET} twice {SECRET}", False, f"{R} twice {R}"),
        ("cut at tok/e", True, f"cut at {R}"),  # the excerpt ended inside it
        ("cut at tok/e", False, "cut at tok/e"),  # the whole body: it did not
        ("ends with to", True, f"ends with {R}"),
        ("ends with t", True, "ends with t"),  # one character: any excerpt could end so
        ("nothing secret here", True, "nothing secret here"),
        ("", True, ""),
    ],
)
def test_redact(text: str, cut_off: bool, expected: str) -> None:
    assert redact(text, [SECRET, ""], cut_off=cut_off) == expected


def test_signing_values_cover_each_entry_and_the_secret_without_its_prefix() -> None:
    values = signing_values("v1,AAA= v1,BBB=", ["whsec_S3CR"])
    for value in ("v1,AAA= v1,BBB=", "v1,AAA=", "AAA=", "v1,BBB=", "BBB=", "whsec_S3CR", "S3CR"):
        assert value in values
    assert redact("sig v1,BBB= key S3CR", values, cut_off=False) == f"sig {R} key {R}"


KEY = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49\n-----END PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"tls={KEY}\n", f"tls={R}\n"),
        (KEY.replace(" PRIVATE", " EC PRIVATE"), R),  # the traditional forms too
        (f"{KEY} and {KEY}", f"{R} and {R}"),
        ("cut: -----BEGIN PRIVATE KEY-----\nMIGHAgEA", f"cut: {R}"),  # cut off inside it
        ("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", None),  # public
        ("no key", None),
    ],
)
def test_private_keys(text: str, expected: str | None) -> None:
    assert private_keys(text) == (text if expected is None else expected)
