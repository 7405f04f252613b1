-- Schema 21: mutual TLS (docs/webhooks.md, "Mutual TLS"): an endpoint's client certificate,
-- its key and, optionally, the CA its receiver's certificate is verified against.
--
-- `webhooks.tls`, a JSON object `{"clientCertificate": PEM, "clientKey": PEM,
-- "caCertificate": PEM or null}` as the API checked it (dispatcher/domain/tls.py); NULL, the
-- default: none. Like `secret_headers`, kept as given since the engine uses it; the API never
-- answers `clientKey` (store/webhooks.py reads it for answers without that key).
--
-- The previous release keeps running on the new schema: it never names the column, and every
-- subscription has it NULL until this release's API sets it. Only this release's engines
-- present the certificate.
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` (a nullable column without a default rewrites nothing;
-- its CHECK reads the table once: a table of subscriptions, milliseconds).
ALTER TABLE webhooks
    ADD COLUMN tls jsonb CHECK (jsonb_typeof(tls) = 'object');
