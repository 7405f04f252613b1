"""The delivery engine: claim, sign, send, record, retry, disable. Never imports the API."""
