-- Schema 23: portal sessions (docs/console.md, "Portal sessions"; docs/admin.md): a short-lived
-- link that opens the console signed in for one workspace, with "read" or "manage"
-- capabilities.
--
-- Only digests are stored: `secret_hash`, the SHA-256 of the link's one-time secret (its URL
-- fragment), and `token_hash`, the SHA-256 of the bearer credential the console exchanged it
-- for (NULL until the exchange, which happens once). A session stops at `expires_at` or at
-- `deleted_at`; every request made with its credential reads this row (store/portal.py).
--
-- The previous release keeps running on the new schema: it never reads the table.
-- Locks: none on an existing table (a new table, its indexes).
CREATE TABLE IF NOT EXISTS portal_sessions (
    id             text PRIMARY KEY,
    workspace_id   text NOT NULL REFERENCES workspaces (id),
    capabilities   text NOT NULL CHECK (capabilities IN ('manage', 'read')),
    parent_origin  text CHECK (char_length(parent_origin) <= 255),
    secret_hash    bytea NOT NULL UNIQUE,
    token_hash     bytea UNIQUE,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    exchanged_at   timestamptz,
    deleted_at     timestamptz
);
