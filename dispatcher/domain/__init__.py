"""Pure code, no I/O: ids, phone numbers, the event catalog, retry schedule, signing."""
