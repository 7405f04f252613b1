"""The public REST API: it writes to the store and never sends HTTP to endpoints."""
