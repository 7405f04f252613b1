-- Schema 11: the admin API (docs/admin.md). An API key may carry a name (what it is for, as its
-- creator wrote it; NULL on every key made before), and the admin API's lists of workspaces and
-- of a workspace's keys are read newest first along an index each.
--
-- Locks: ACCESS EXCLUSIVE on api_keys for a catalog change (a nullable column without a
-- default rewrites nothing), then SHARE on workspaces and api_keys while each index is built
-- (both tables hold one row per tenant or key: milliseconds). The previous release keeps
-- running on it: it never names the column.
ALTER TABLE api_keys ADD COLUMN name text;

CREATE INDEX workspaces_page ON workspaces (created_at DESC, id DESC);
CREATE INDEX api_keys_page ON api_keys (workspace_id, created_at DESC, id DESC);
