"""A webhook's mutual TLS as the API takes and answers it (`tls`, docs/webhooks.md "Mutual
TLS"): the body's shape, the checks (domain/tls.py, 400 naming `body.tls.<field>`), and the
answer, which never carries `clientKey` (write-only, as `secretHeaders` values are)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import TypedDict

from dispatcher.api.models import Body
from dispatcher.domain import tls
from dispatcher.domain.clock import isoformat
from dispatcher.domain.resources import Timestamp
from dispatcher.errors import FieldError, ValidationFailed

FIELD = "tls"

Pem = Annotated[str, Field(min_length=1, max_length=tls.MAX_PEM_LENGTH)]


class Tls(Body):
    """Mutual TLS: the client certificate each attempt presents (PEM; with its intermediates
    after it, if any), its private key (PEM, unencrypted; write-only: never answered), and the
    CA to verify the receiver's certificate against instead of the system's (PEM; null: the
    system's)."""

    clientCertificate: Pem
    clientKey: Annotated[Pem, Field(json_schema_extra={"writeOnly": True})]
    caCertificate: Pem | None = None


class TlsOut(TypedDict):
    """Mutual TLS as answered: on, with the client certificate, its subject and expiry, and
    the CA (null: the system's). Never the key."""

    clientCertificate: str
    subject: str | None  # the client certificate's subject (RFC 4514)
    expiresAt: Timestamp | None  # the client certificate's notAfter
    caCertificate: str | None


def stored_tls(given: Tls | None, now: datetime) -> dict[str, Any] | None:
    """`tls` as stored, after the checks (ValidationFailed naming each field that fails);
    None for null (none)."""
    if given is None:
        return None
    value = {
        tls.CLIENT_CERTIFICATE: given.clientCertificate,
        tls.CLIENT_KEY: given.clientKey,
        tls.CA_CERTIFICATE: given.caCertificate,
    }
    problems = tls.tls_problems(value, now)
    if problems:
        raise ValidationFailed([FieldError(f"body.{FIELD}.{p.field}", p.message) for p in problems])
    return value


def tls_out(stored: Mapping[str, Any] | None) -> TlsOut | None:
    """What an answer shows of the stored `tls` (read without `clientKey` by the store)."""
    if stored is None:
        return None
    certificate = str(stored.get(tls.CLIENT_CERTIFICATE) or "")
    summary = tls.summary(certificate)
    return {
        "clientCertificate": certificate,
        "subject": None if summary is None else summary.subject,
        "expiresAt": None if summary is None else isoformat(summary.expires_at),
        "caCertificate": stored.get(tls.CA_CERTIFICATE),
    }
