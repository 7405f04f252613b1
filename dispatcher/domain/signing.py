"""Standard Webhooks signing (standardwebhooks.com): secrets, keys and signatures."""

from __future__ import annotations

import base64
import hmac
import secrets
from collections.abc import Sequence
from datetime import datetime

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # within Standard Webhooks' 24..64
# How far a receiver lets `webhook-timestamp` be from its own clock (Standard Webhooks' advice):
# an older request is a replay.
TIMESTAMP_TOLERANCE_SECONDS = 300


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def check_secret(secret: str) -> str:
    """`secret` unchanged when it is a Standard Webhooks secret: `whsec_` and the base64 of 24
    to 64 bytes (a validator for secrets given from outside, e.g. the operator sink's)."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"expected a {SECRET_PREFIX} secret")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError:
        raise ValueError(f"expected base64 after {SECRET_PREFIX}") from None
    if not 24 <= len(key) <= 64:
        raise ValueError("expected a key of 24 to 64 bytes")
    return secret


def signing_secrets(
    secret: str, previous: str | None, previous_expires_at: datetime | None, now: datetime
) -> list[str]:
    """The secrets that sign an endpoint's requests at `now`: its secret, and the one it
    replaced until that one's grace ends (strictly before `previous_expires_at`). The demo
    receiver's statement says the same in SQL (queries/webhooks.sql `demo_secrets`;
    tests/store/test_facts_agree.py keeps the two equal)."""
    if previous and previous_expires_at is not None and previous_expires_at > now:
        return [secret, previous]
    return [secret]


def secret_key(secret: str) -> bytes:
    """The HMAC key a `whsec_` secret stands for."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(keys: Sequence[bytes], message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header: one `v1,<base64>` entry per key, space-separated.

    Several keys are passed during a secret rotation, so receivers holding either the old or
    the new secret verify the same request.
    """
    signed = b"%s.%d.%s" % (message_id.encode(), timestamp, body)
    if len(keys) == 1:  # the usual case, on every attempt: no generator, no join
        return "v1," + base64.b64encode(hmac.digest(keys[0], signed, "sha256")).decode()
    return " ".join(
        "v1," + base64.b64encode(hmac.digest(key, signed, "sha256")).decode() for key in keys
    )


def verify(
    keys: Sequence[bytes], message_id: str, timestamp: str, body: bytes, signature: str, now: float
) -> bool:
    """Whether a request carries a valid Standard Webhooks signature, as a receiver checks it:
    `timestamp` (the `webhook-timestamp` header) within the tolerance of `now`, and one of the
    `v1,` entries of `signature` made with one of `keys` over id, timestamp and body."""
    if not timestamp.isascii() or not timestamp.isdigit():
        return False
    moment = int(timestamp)
    if abs(now - moment) > TIMESTAMP_TOLERANCE_SECONDS:
        return False
    offered = [entry.removeprefix("v1,") for entry in signature.split() if entry.startswith("v1,")]
    expected = [sign([key], message_id, moment, body).removeprefix("v1,") for key in keys]
    # Every pair is compared (no early exit), each in constant time.
    matches = [hmac.compare_digest(o.encode(), e.encode()) for o in offered for e in expected]
    return any(matches)
