"""structlog configuration: JSON lines in production, readable lines in a terminal."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

from dispatcher.domain.redaction import PEM_KEY_MARK, private_keys

_SECRET_KEYS = ("secret", "password", "authorization", "api_key", "key", "token")


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Last line of defence: values under secret-sounding keys never reach the output, nor a
    PEM private key (a webhook's `tls.clientKey`) under any key."""
    for name, value in list(event.items()):
        if _secret_sounding(name):
            event[name] = "***"
        elif isinstance(value, str) and PEM_KEY_MARK in value:
            event[name] = private_keys(value)
    return event


@functools.lru_cache(maxsize=1024)
def _secret_sounding(name: str) -> bool:
    """Whether values under `name` are redacted: decided once per field name (the names are
    the code's, a small set), not at every event."""
    lowered = name.lower()
    return any(
        part == lowered
        or lowered.endswith("_" + part)
        or name.endswith(part.title().replace("_", ""))  # camelCase: clientSecret, accessToken
        for part in _SECRET_KEYS
    )


def _json_line(event: Any, **_: Any) -> str:
    """One event as a compact JSON line, by orjson: the stdlib encoder the renderer uses by
    default was most of the cost of the API's one line per request. What it cannot encode is
    written as its str()."""
    return orjson.dumps(event, default=str).decode()


def configure(fmt: str = "auto", level: str = "info", stream: Any = None, tap: Any = None) -> None:
    """Set up structlog. `tap`, if given, sees every event just before rendering (tests scan
    the whole suite's logs through it)."""
    stream = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json_line)
        if use_json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    # Our middleware turns every handler error into a logged 500; what aiohttp's server logger
    # still reports is malformed HTTP it already answered with 400: not worth a traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    _route_stdlib_logging(stream, renderer, level)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            *([tap] if tap is not None else []),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )


_HANDLER_NAME = "dispatcher"


def _route_stdlib_logging(stream: Any, renderer: Any, level: str) -> None:
    """Every library's log record (asyncpg's "Failed to restore the pool connection floor"
    during an outage, aiohttp's, asyncio's "Task exception was never retrieved", Python's
    warnings) goes out through the same renderer as ours: in JSON, one object per line, the
    traceback inside it (`exception`), never as lines of plain text between them."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    # Replace only our own handler (configure may run again); leave others' (a test runner's).
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.getLevelNamesMapping()[level.upper()])
    logging.captureWarnings(True)
