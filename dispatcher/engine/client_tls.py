"""The SSL contexts of endpoints with mutual TLS (docs/delivery.md, "Mutual TLS").

One context per endpoint and configuration: keyed by the webhook's id and a fingerprint of its
`tls` (domain/tls.py), so a PATCH is used from the next attempt, and the connections made with
it are pooled under the same key (engine/http1.py `Tls.pool`): a connection that presented one
webhook's certificate never carries another webhook's request.

The client certificate is presented with `load_cert_chain`, which reads files only: the
certificate and key are written to a private directory (0700, made by `mkdtemp`), each file
0600, and removed as soon as the context has loaded them (whatever happens). With
`caCertificate`, the context trusts that CA only (`cadata`), for this endpoint only; without
it, the system's CAs, as every other endpoint.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from dispatcher.domain import tls
from dispatcher.engine.http1 import Tls

MAX_CONTEXTS = 10_000  # cleared beyond (each is rebuilt on its next attempt)


def context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """An SSL context presenting `config`'s client certificate, trusting its CA if any."""
    ca = config.get(tls.CA_CERTIFICATE)
    made = ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()
    directory = tempfile.mkdtemp(prefix="dispatcher-tls-")
    try:
        certificate = os.path.join(directory, "certificate.pem")
        key = os.path.join(directory, "key.pem")
        for path, field in ((certificate, tls.CLIENT_CERTIFICATE), (key, tls.CLIENT_KEY)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(str(config.get(field) or ""))
        made.load_cert_chain(certificate, key)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return made


class ClientContexts:
    """The contexts of the endpoints with mutual TLS, made on their first attempt; one per
    endpoint, replaced when its configuration changes."""

    def __init__(self) -> None:
        self._made: dict[str, tuple[str, Tls]] = {}  # webhook id -> (fingerprint, Tls)

    def __len__(self) -> int:
        return len(self._made)

    def get(self, webhook_id: str, config: Mapping[str, Any]) -> Tls:
        """The endpoint's context and pool (ssl.SSLError, OSError: it cannot be made)."""
        fingerprint = tls.fingerprint(config)
        found = self._made.get(webhook_id)
        if found is not None and found[0] == fingerprint:
            return found[1]
        if len(self._made) >= MAX_CONTEXTS:
            self._made.clear()
        made = Tls(f"{webhook_id}/{fingerprint}", context(config))
        self._made[webhook_id] = (fingerprint, made)
        return made
