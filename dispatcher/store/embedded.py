"""An embedded Postgres (the `pgserver` wheel) for when no DATABASE_URL is given.

A fresh machine then needs nothing installed: the server's data lives in a directory
(default `.dispatcher/pgdata`), survives restarts, and the server stops when we exit.
`pgserver` is the optional extra `dispatcher[embedded]` (34 MB of Postgres binaries): the
image and any deployment with a DATABASE_URL do without it, so its absence is told here, where
it is needed, as the one thing to do about it.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from dispatcher.errors import EmbeddedPostgresMissing


def start_embedded(pgdata: str | Path) -> tuple[str, Any]:
    """Start (or join) the server for `pgdata`; returns its URL and a handle to stop it.

    Raises EmbeddedPostgresMissing, before anything is created, when `pgserver` cannot be
    imported (the extra is not installed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from pgserver.postgres_server import get_server
        except ImportError as exc:
            raise EmbeddedPostgresMissing(
                "no DATABASE_URL is set and the embedded Postgres is not installed: set "
                f"DATABASE_URL or install dispatcher[embedded] (importing pgserver: {exc})"
            ) from exc
    path = Path(pgdata).resolve()
    path.mkdir(parents=True, exist_ok=True)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = get_server(path, cleanup_mode="stop")
    return str(server.get_uri()), server


def stop_embedded(server: Any) -> None:
    try:
        server.cleanup()
    except Exception:  # best effort: the process is exiting anyway
        logging.getLogger(__name__).debug("embedded postgres cleanup failed", exc_info=True)
