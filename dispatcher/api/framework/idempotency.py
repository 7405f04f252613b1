"""Idempotency-Key as every door that takes one reads it (POST /v1/events, each event of
POST /v1/events/batch, POST /v1/messages): the key's shape, the header, and the fingerprint
that tells the identical request from another. The store keeps the window and the replay rule
(store/idempotency.py).

A fingerprint is keyed (HMAC-SHA-256 under a key derived from the deployment's instance
secret): it tells two requests apart without being a plain hash of the body, which could be
brute-forced back to a short secret in it (a phone number) or confirm a guess offline.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from typing import Any

import orjson
from aiohttp import web

from dispatcher.api.framework.http import single_header
from dispatcher.api.framework.operations import HeaderParameter
from dispatcher.errors import FieldError, ValidationFailed

MAX_IDEMPOTENCY_KEY = 255
# Visible ASCII (the IETF Idempotency-Key draft's key is a string of it): a header byte outside
# it arrives as a lone surrogate that the database cannot store, or as a look-alike of another
# key.
IDEMPOTENCY_KEY_SHAPE = re.compile(rf"[!-~]{{1,{MAX_IDEMPOTENCY_KEY}}}")
IDEMPOTENCY_KEY_PROBLEM = f"must be 1..{MAX_IDEMPOTENCY_KEY} visible ASCII characters (no spaces)"
IDEMPOTENCY_KEY = HeaderParameter(
    "Idempotency-Key", {"type": "string", "pattern": f"^{IDEMPOTENCY_KEY_SHAPE.pattern}$"}
)


def idempotency_key(request: web.Request) -> str | None:
    """The request's Idempotency-Key (None without one), or a 400 naming the header when it is
    sent twice or is not 1..255 visible ASCII characters."""
    key = single_header(request, "Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY_SHAPE.fullmatch(key):
        raise ValidationFailed([FieldError("header.Idempotency-Key", IDEMPOTENCY_KEY_PROBLEM)])
    return key


# What the fingerprint key is derived for: the instance secret also keys list cursors, and a
# key used for two purposes would let one's outputs stand in for the other's.
FINGERPRINT_KEY_PURPOSE = b"dispatcher/idempotency-fingerprint/v1"


@functools.cache
def fingerprint_key(instance_secret: bytes) -> bytes:
    """The fingerprints' own key, derived from the deployment's instance secret (the one every
    replica reads from `instance_secrets`, made once by the first to start): the same on every
    replica and across restarts, and never stored apart."""
    return hmac.new(instance_secret, FINGERPRINT_KEY_PURPOSE, hashlib.sha256).digest()


def request_fingerprint(instance_secret: bytes, body: dict[str, Any]) -> bytes:
    """HMAC-SHA-256 of the body as a JSON value (keys sorted, no white space), keyed by
    `fingerprint_key`. Two requests have the same fingerprint when they say the same thing,
    however their JSON was written (key order, spacing, escapes), and different ones when any
    value or list order differs; without the key, a stored fingerprint confirms no guess."""
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return hmac.new(fingerprint_key(instance_secret), canonical, hashlib.sha256).digest()
