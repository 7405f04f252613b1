-- Schema 20: an endpoint's authentication (docs/webhooks.md, "Authentication"): OAuth 2.0
-- client credentials, the engine fetching a bearer token from the endpoint's token URL.
--
-- `webhooks.auth` (jsonb): `{"type": "oauth2", "tokenUrl", "clientId", "clientSecret",
-- "scope"?, "audience"?}` (dispatcher/domain/endpoint_auth.py checks its shape at the API);
-- NULL, the default: none. Like `secret_headers`, kept as given, since the engine sends the
-- client secret; the API never returns `clientSecret`.
--
-- The previous release keeps running on the new schema: it never names the column, and every
-- subscription has it NULL until this release's API sets it. Only this release's engines
-- fetch tokens: run no older engine once a webhook has `auth` (its attempts would go out
-- without the bearer token and be refused by the receiver, then retried as failures).
--
-- Locks: ACCESS EXCLUSIVE on `webhooks` (a nullable column without a default rewrites nothing;
-- its CHECK reads the table once: a table of subscriptions, milliseconds).
ALTER TABLE webhooks
    ADD COLUMN auth jsonb
        CHECK (jsonb_typeof(auth) = 'object' AND auth ? 'type');
