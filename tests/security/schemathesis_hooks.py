"""schemathesis hooks for tests/security/test_openapi.py (loaded with SCHEMATHESIS_HOOKS).

`positive_data_acceptance` reports every schema-valid request the server refuses: the
document must be as strict as the server. A few refusals depend on what no JSON Schema can
state: whether a number is the workspace's, whether a cursor was signed by the server, a
window relative to now, one field against another, and JSON Schema's integer `1.0` (the API
takes integers as written, docs/webhooks.md). Those, and only those, are dropped here: a
refusal is dropped when every field error it names is one of `INEXPRESSIBLE`.
"""

from __future__ import annotations

import re
from typing import Any

import schemathesis

# (field path, message) patterns of refusals the document cannot express, with why.
INEXPRESSIBLE: tuple[tuple[str, str], ...] = (
    # Which numbers a workspace owns is data, not schema.
    (r"body\.(from|to|numberId|numberIds|events\[\d+\]\.numberId)", "not one of the workspace's"),
    # Relative to now, and one field against another.
    (r"body\.since", "must be at most .* days ago"),
    (r"body\.until", "must be after `since`"),
    (r"query\.until", "must not be before"),
    # JSON Schema calls 49.0 an integer; the API takes integers as written (no `.0`).
    (r"body\.[A-Za-z.\[\]0-9]+", "Input should be a valid integer"),
    # Across `headers` and `secretHeaders` (their count, size and names), stated in their
    # description only.
    (r"body\.(headers|secretHeaders)", "at most|repeats"),
    # A PATCH's `auth` without `clientSecret` keeps the stored one only for the same token
    # URL and client (api/endpoint_auth.py): the stored `auth` is state.
    (r"body\.auth\.clientSecret", "is required unless the stored auth"),
    # The filter's bounds (its size in bytes of compact JSON, its values and array elements
    # counted across every level, what its arrays hold), stated in its description.
    (
        r"body\.filter",
        "must be at most .* bytes|must hold at most|its arrays must hold at most"
        "|an array in a filter holds only|an element of a filter's array",
    ),
    # `url` against `mode`: required for a push webhook (the default), absent for a poll one.
    (r"body\.url", "is required for a push webhook|must be absent: a poll webhook"),
    # A poll's iterator is the server's own (like a cursor), and `since` goes without one.
    (r"query\.iterator", "must be an iterator a poll of this service answered"),
    (r"query\.since", "must not be sent with an iterator"),
    # Mutual TLS: whether a PEM holds a readable certificate or key, the key matches the
    # certificate, and the dates (domain/tls.py), stated in its description.
    (
        r"body\.tls\.(clientCertificate|clientKey|caCertificate)",
        "is not PEM|is not a valid|does not match|has expired|is not valid yet|is encrypted",
    ),
)


# Error codes of refusals that depend on the server's state, not on the request's shape.
STATEFUL_CODES = {
    # A cursor is signed by the server for one list and its filters (api/framework/pagination.py).
    "invalid_cursor",
    # An Idempotency-Key reused with another request (each event of a batch has its own).
    "idempotency_key_reused",
}


# A NUL anywhere in the path or the query is refused before any route (api/framework/http.py),
# e.g. in an opaque `cursor`, whose schema (any string) cannot exclude it.
NUL_IN_URL = "the URL must not contain NUL (%00)"


def _inexpressible(error: dict[str, Any]) -> bool:
    return any(
        re.fullmatch(path, error.get("path", "")) and re.search(message, error.get("message", ""))
        for path, message in INEXPRESSIBLE
    )


@schemathesis.hook
def filter_failure(ctx: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a refusal of state, or a 400 whose field errors are all
    inexpressible."""
    if response.status_code not in (400, 422):
        return True
    try:
        body = response.json()
    except ValueError:
        return True
    if body.get("code") in STATEFUL_CODES:
        return False
    if body.get("message") == NUL_IN_URL:
        return False
    errors = body.get("errors") or []
    return not (errors and all(_inexpressible(error) for error in errors))
