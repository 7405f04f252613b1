"""A webhook's mutual TLS (`tls`, docs/webhooks.md "Mutual TLS"): what it is, the checks made
when it is set, and what an answer shows of it.

`tls` is `{"clientCertificate": PEM, "clientKey": PEM, "caCertificate": PEM or null}`, stored
as given (the engine presents the certificate and needs the key, as it sends secret header
values): the key is write-only, kept out of every answer by the store (`WITHHELD_KEYS` in
domain/endpoints.py). The checks parse each PEM with `cryptography` (Python's ssl can only load
them into a context, from files, and says neither which one is wrong nor when it expires):
each is PEM and readable, the key is unencrypted and the one of the certificate, and every
certificate is valid now. A problem names its field and never quotes the value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import serialization

CLIENT_CERTIFICATE = "clientCertificate"
CLIENT_KEY = "clientKey"
CA_CERTIFICATE = "caCertificate"
FIELDS = (CLIENT_CERTIFICATE, CLIENT_KEY, CA_CERTIFICATE)
WRITE_ONLY = (CLIENT_KEY,)  # never answered
MAX_PEM_LENGTH = 65536  # characters of each PEM (a certificate with its chain, a CA bundle)

_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)
_KEY = re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.+?-----END \1PRIVATE KEY-----", re.DOTALL)


class TlsProblem(NamedTuple):
    field: str  # one of FIELDS
    message: str  # never quotes the value


class Summary(NamedTuple):
    """What an answer shows of a certificate besides itself."""

    subject: str  # RFC 4514, e.g. `CN=dispatcher,O=Example`
    expires_at: datetime  # its notAfter (UTC)


def _certificates(field: str, pem: str, now: datetime) -> tuple[list[x509.Certificate], str]:
    """The certificates of a PEM field, or a problem (text) and none."""
    if not _CERTIFICATE.search(pem):
        return [], "is not PEM: expected -----BEGIN CERTIFICATE-----"
    try:
        certificates = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        return [], "is not a valid certificate: its PEM holds no readable X.509 certificate"
    for certificate in certificates:
        if now > certificate.not_valid_after_utc:
            return [], f"has expired (on {certificate.not_valid_after_utc.isoformat()})"
        if now < certificate.not_valid_before_utc:
            return [], f"is not valid yet (from {certificate.not_valid_before_utc.isoformat()})"
    return certificates, ""


def _public(key: Any) -> bytes:
    return bytes(
        key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def tls_problems(tls: Mapping[str, str | None], now: datetime) -> list[TlsProblem]:
    """What is wrong with `tls` at `now` (none: it may be stored)."""
    problems: list[TlsProblem] = []
    client, problem = _certificates(CLIENT_CERTIFICATE, tls.get(CLIENT_CERTIFICATE) or "", now)
    if problem:
        problems.append(TlsProblem(CLIENT_CERTIFICATE, problem))
    key_pem = tls.get(CLIENT_KEY) or ""
    if not _KEY.search(key_pem):
        problems.append(TlsProblem(CLIENT_KEY, "is not PEM: expected -----BEGIN PRIVATE KEY-----"))
    else:
        try:
            key = serialization.load_pem_private_key(key_pem.encode(), password=None)
        except TypeError:
            problems.append(TlsProblem(CLIENT_KEY, "is encrypted: give it unencrypted"))
        except Exception:  # ValueError, UnsupportedAlgorithm: nothing usable
            problems.append(TlsProblem(CLIENT_KEY, "is not a valid private key"))
        else:
            if client and _public(client[0].public_key()) != _public(key.public_key()):
                problems.append(TlsProblem(CLIENT_KEY, f"does not match {CLIENT_CERTIFICATE}"))
    ca = tls.get(CA_CERTIFICATE)
    if ca is not None:
        _, problem = _certificates(CA_CERTIFICATE, ca, now)
        if problem:
            problems.append(TlsProblem(CA_CERTIFICATE, problem))
    return problems


def summary(certificate_pem: str) -> Summary | None:
    """The subject and expiry of a PEM's first certificate (None: unreadable, which a checked
    one never is)."""
    try:
        certificate = x509.load_pem_x509_certificates(certificate_pem.encode())[0]
    except (ValueError, IndexError):
        return None
    return Summary(certificate.subject.rfc4514_string(), certificate.not_valid_after_utc)


def fingerprint(tls: Mapping[str, Any]) -> str:
    """A digest of the whole configuration: what the engine's contexts and connections of an
    endpoint are keyed by besides its id, so that a change is used from the next attempt."""
    digest = hashlib.sha256()
    for field in FIELDS:
        digest.update((tls.get(field) or "").encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]
