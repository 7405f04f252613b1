"""An embedded Postgres (the `pgserver` wheel) for when no DATABASE_URL is given.

A fresh machine then needs nothing installed: the server's data lives in a directory
(default `.dispatcher/pgdata`), survives restarts, and the server stops when we exit.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any


def start_embedded(pgdata: str | Path) -> tuple[str, Any]:
    """Start (or join) the server for `pgdata`; returns its URL and a handle to stop it."""
    path = Path(pgdata).resolve()
    path.mkdir(parents=True, exist_ok=True)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.postgres_server import get_server

        server = get_server(path, cleanup_mode="stop")
    return str(server.get_uri()), server


def stop_embedded(server: Any) -> None:
    try:
        server.cleanup()
    except Exception:  # best effort: the process is exiting anyway
        logging.getLogger(__name__).debug("embedded postgres cleanup failed", exc_info=True)
