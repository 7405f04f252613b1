"""Certificates for the mutual TLS tests, made with `cryptography` (EC P-256: milliseconds): a
test CA, certificates it signs (a server's for 127.0.0.1, clients'), and broken ones."""

from __future__ import annotations

import ipaddress
import ssl
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


class Issued(NamedTuple):
    certificate: str  # PEM
    key: str  # PEM (PKCS#8, unencrypted)
    subject: str  # RFC 4514
    expires_at: datetime


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def new_key_pem() -> str:
    return _key_pem(ec.generate_private_key(ec.SECP256R1()))


class Authority:
    """A CA that issues certificates valid from `now - 1 day` for `days` days (by default)."""

    def __init__(self, name: str = "dispatcher test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.now(UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(CA_USAGE, critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM).decode()

    def issue(
        self,
        common_name: str,
        *,
        server: bool = False,
        not_before: datetime | None = None,
        not_after: datetime | None = None,
    ) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        start = not_before or now - timedelta(days=1)
        end = not_after or now + timedelta(days=10)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
        return Issued(pem, _key_pem(key), subject.rfc4514_string(), certificate.not_valid_after_utc)

    def server_context(self, *, require_client_certificate: bool = True) -> ssl.SSLContext:
        """A server's context: its certificate for 127.0.0.1 from this CA, and (by default)
        a client certificate this CA signed required of every client."""
        issued = self.issue("127.0.0.1", server=True)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as directory:
            certificate, key = Path(directory, "cert.pem"), Path(directory, "key.pem")
            certificate.write_text(issued.certificate)
            key.write_text(issued.key)
            context.load_cert_chain(certificate, key)
        if require_client_certificate:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=self.pem)
        return context
