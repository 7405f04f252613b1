"""Responses, the one error shape, request ids, and reading JSON bodies (or their absence).

The error shape also covers requests aiohttp's own HTTP parser refuses before any middleware
runs (see ShapedErrorProtocol; api/framework/connections.py installs it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from http import HTTPStatus
from typing import Any, Self, TypeVar

import orjson
import structlog
from aiohttp import http_exceptions, web
from pydantic import BaseModel, ValidationError

from dispatcher import metrics, tracing
from dispatcher.api import console
from dispatcher.api.framework.shapes import ErrorBody, ErrorDetail
from dispatcher.domain.json_values import DEPTH_PROBLEM, MAX_JSON_DEPTH, NUMBER_PROBLEM, in_range
from dispatcher.errors import (
    Conflict,
    DatabaseUnavailable,
    DispatcherError,
    FieldError,
    Forbidden,
    IdempotencyKeyReused,
    InvalidCursor,
    NotFound,
    OutcomeUnknown,
    Overloaded,
    Unauthorized,
    ValidationFailed,
)

ModelT = TypeVar("ModelT", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 1024 * 1024
REQUEST_ID_HEADER = "X-Request-Id"
# Seconds a client is told to wait after a 503 (`unavailable`, `outcome_unknown`, `overloaded`):
# short, since all pass quickly; a client that spreads its retries (jitter) helps the process
# recover.
RETRY_AFTER = "1"
TRACE = web.RequestKey("trace", str)
# What a request does while it waits for a body that had not arrived with its head (a slow
# client's): each entry is entered before the wait and left once the body is in, the last
# first. The admission middleware gives its slot back meanwhile (a slow body must not crowd
# out other requests), and `admit` looks the key up again after it (a key revoked during the
# wait writes nothing).
BodyWait = Callable[[], AbstractAsyncContextManager[None]]
BODY_WAITS = web.RequestKey("body_waits", list[BodyWait])
WORKSPACE_ID = web.RequestKey("workspace_id", str)
_REQUEST_ID_SHAPE = re.compile(r"^[A-Za-z0-9_\-]{8,64}$")

log = structlog.get_logger("dispatcher.api")


class ApiError(Exception):
    """An error answer: HTTP status, error code, message and (optionally) field errors."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        errors: list[ErrorDetail] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors
        self.headers = headers or {}


class RequestBodyTimeout(TimeoutError):
    """The request's body did not arrive within DISPATCHER_BODY_TIMEOUT of its head.

    Raised by the body's reads (api/framework/connections.py sets it on the request's payload); the
    error middleware answers it 408 `request_timeout` and closes the connection. A
    TimeoutError so that aiohttp's own draining of an unread body stops on it too."""


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


def error_body(error: ApiError, trace: str) -> ErrorBody:
    title = HTTPStatus(error.status).phrase
    if error.errors:
        return {
            "status": error.status,
            "code": error.code,
            "title": title,
            "message": error.message,
            "errors": error.errors,
            "trace": trace,
        }
    return {
        "status": error.status,
        "code": error.code,
        "title": title,
        "message": error.message,
        "trace": trace,
    }


def from_domain(exc: DispatcherError) -> ApiError:
    """Map a domain error to its HTTP answer."""
    if isinstance(exc, ValidationFailed):
        return ApiError(
            400,
            "validation_error",
            exc.message,
            [{"path": e.path, "message": e.message} for e in exc.errors],
        )
    if isinstance(exc, FieldError):
        return ApiError(
            400, "validation_error", exc.message, [{"path": exc.path, "message": exc.message}]
        )
    if isinstance(exc, NotFound):
        return ApiError(404, "not_found", exc.message)
    if isinstance(exc, Conflict):
        return ApiError(409, "conflict", exc.message)
    if isinstance(exc, IdempotencyKeyReused):
        return ApiError(422, "idempotency_key_reused", exc.message)
    if isinstance(exc, InvalidCursor):
        return ApiError(400, "invalid_cursor", exc.message)
    if isinstance(exc, Unauthorized):
        return ApiError(401, "unauthorized", exc.message, headers={"WWW-Authenticate": "Bearer"})
    if isinstance(exc, Forbidden):
        return ApiError(403, "forbidden", exc.message)
    if isinstance(exc, Overloaded):
        return ApiError(503, "overloaded", exc.message, headers={"Retry-After": RETRY_AFTER})
    if isinstance(exc, OutcomeUnknown):
        # Not "unavailable": the write may have been stored (docs/api.md, "Answers lost with
        # the connection"); the message says to retry with the same Idempotency-Key.
        return ApiError(503, "outcome_unknown", exc.message, headers={"Retry-After": RETRY_AFTER})
    if isinstance(exc, DatabaseUnavailable):
        message = "the service is temporarily unavailable; retry shortly"
        if exc.nothing_stored:
            message = "the database cannot be reached right now; nothing was stored: retry shortly"
        return ApiError(503, "unavailable", message, headers={"Retry-After": RETRY_AFTER})
    return ApiError(500, "internal_error", "internal error; quote the trace id when reporting it")


def _from_http(exc: web.HTTPException) -> ApiError:
    if isinstance(exc, web.HTTPNotFound):
        return ApiError(404, "not_found", "no such route")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return ApiError(405, "method_not_allowed", f"method not allowed; allowed: {allowed}",
                        headers={"Allow": allowed})  # fmt: skip
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return ApiError(413, "payload_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
    return ApiError(exc.status, "http_error", exc.reason)


def _request_id(request: web.Request) -> str:
    incoming = request.headers.get(REQUEST_ID_HEADER, "")
    # A fresh id is a label for logs, not a secret: 128 random bits without a system call.
    return incoming if _REQUEST_ID_SHAPE.match(incoming) else f"{random.getrandbits(128):032x}"


def route_template(request: web.Request) -> str:
    """The route as declared (`/v1/webhooks/{webhook_id}`): bounded, and free of ids."""
    info = request.match_info
    resource = info.route.resource if info is not None and info.route is not None else None
    return resource.canonical if resource is not None else "unmatched"


@functools.cache
def _request_metrics(route: str, method: str, status: int) -> tuple[Any, Any]:
    """The request's counter and histogram, by its labels: found once per route template,
    method and status (a bounded set: templates, not paths), not at every request."""
    return (
        metrics.HTTP_REQUESTS.labels(route, method, str(status)),
        metrics.HTTP_DURATION.labels(route, method),
    )


def declare_request_series(route: str, method: str, status: int) -> None:
    """Create a route's request series for its success status before any request: its
    counter at 0 and its histogram, known in advance (`increase()` cannot see a series'
    first increment). Other statuses appear with their first answer."""
    _request_metrics(route, method, status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Gives every answer a request id, and every failure the one error shape."""
    trace = _request_id(request)
    request[TRACE] = trace
    started = time.perf_counter()
    response: web.StreamResponse
    try:
        if "\x00" in request.path or "\x00" in request.query_string:
            raise ApiError(400, "validation_error", "the URL must not contain NUL (%00)")
        response = await handler(request)
    except ApiError as exc:
        response = _error_response(exc, trace)
    except Overloaded as exc:
        # Not an error of ours: counted, and logged as the request's line only (a flood of
        # refusals must not become a flood of error logs).
        metrics.API_OVERLOADED.labels(exc.reason).inc()
        response = _error_response(from_domain(exc), trace)
    except DispatcherError as exc:
        api_error = from_domain(exc)
        if api_error.status >= 500:
            log.error("api.error", trace=trace, error=type(exc).__name__, detail=str(exc))
        response = _error_response(api_error, trace)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _error_response(_from_http(exc), trace)
    except RequestBodyTimeout:
        message = "the request body did not arrive within DISPATCHER_BODY_TIMEOUT"
        response = _error_response(ApiError(408, "request_timeout", message), trace)
        response.force_close()
    except Exception:
        log.exception("api.unhandled", trace=trace, method=request.method, path=request.path)
        response = _error_response(from_domain(DispatcherError()), trace)
    response.headers[REQUEST_ID_HEADER] = trace
    under_console = request.path == console.PREFIX or request.path.startswith(console.PREFIX + "/")
    # Under /console every answer, an error too (an unknown file, a method, a query), carries
    # the console's policy and headers (docs/console.md); a portal session's page has a policy
    # of its own (api/portal.py), kept.
    if under_console and "Content-Security-Policy" not in response.headers:
        response.headers.update(console.HEADERS)
    elapsed = time.perf_counter() - started
    route = route_template(request)
    counted, timed = _request_metrics(route, request.method, response.status)
    counted.inc()
    timed.observe(elapsed)
    log.info(
        "api.request",
        method=request.method,
        route=route,
        status=response.status,
        duration_ms=round(elapsed * 1000, 2),
        request_id=trace,
    )
    return response


@web.middleware
async def tracing_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request's span (dispatcher/tracing.py). Registered only while tracing is on, and
    outside the error middleware, so that its status is the one the client got."""
    route = route_template(request)
    try:
        host, port = request.url.host, request.url.port
    except ValueError:  # a Host header that is not host[:port]: the span goes without
        host, port = None, None
    with tracing.serving(
        request.method,
        None if route == "unmatched" else route,
        path=request.path,
        scheme=request.scheme,
        host=host,
        port=port,
        headers=request.headers,
    ) as span:
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # a redirect, raised through the error middleware
            tracing.answered(span, exc.status)
            raise
        except BaseException as exc:  # the request was cancelled (the client went away)
            tracing.failed(span, exc)
            raise
        tracing.answered(span, response.status)
        return response


# Every error answer is JSON that no browser takes for a page: `nosniff`, and the characters
# that could open markup written as JSON escapes. A message or a field's path may quote what
# the client sent (an unknown parameter's name, a value); a JSON client reads it unchanged,
# while no byte of it reads as HTML to anything that sniffs, or mis-serves, the answer.
_MARKUP = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"), (b"'", b"\\u0027"))
ERROR_HEADERS = {"X-Content-Type-Options": "nosniff"}


def error_response(
    error: ApiError, trace: str, headers: dict[str, str] | None = None
) -> web.Response:
    """The one rendering of an error answer (the middleware's and the protocol's)."""
    body = orjson.dumps(error_body(error, trace))
    for char, escaped in _MARKUP:
        body = body.replace(char, escaped)
    return web.Response(
        body=body,
        status=error.status,
        content_type="application/json",
        headers={**ERROR_HEADERS, **error.headers, **(headers or {})},
    )


def _error_response(error: ApiError, trace: str) -> web.Response:
    return error_response(error, trace)


def single_header(request: web.Request, name: str) -> str | None:
    """The value of a header that must not be sent twice, or None when it is absent.

    Two values are ambiguous (a proxy may read one, we the other), so they are refused rather
    than one of them picked.
    """
    values = request.headers.getall(name, [])
    if len(values) > 1:
        raise ValidationFailed([FieldError(f"header.{name}", "must be sent once, not repeated")])
    return values[0] if values else None


def _check_length(request: web.Request) -> None:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")


async def read_body(request: web.Request) -> bytes:
    """The request's body, at most MAX_BODY_BYTES: the one read of a body, so that a body
    still on its way runs the request's BODY_WAITS (no admission slot held meanwhile, the
    key looked up again after it)."""
    _check_length(request)
    if request.content.is_eof():  # it came with the head (or was read already): no wait
        raw = await request.read()
    else:
        async with contextlib.AsyncExitStack() as stack:
            for wait in request.get(BODY_WAITS, ()):
                await stack.enter_async_context(wait())
            raw = await request.read()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
    return raw


def _require_json_type(request: web.Request) -> None:
    single_header(request, "Content-Type")
    if request.content_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as application/json")


async def read_json(request: web.Request) -> Any:
    _check_length(request)
    _require_json_type(request)
    return _decode(await read_body(request))


async def read_no_body(request: web.Request) -> None:
    """For endpoints that take no body: nothing (whatever the content type) or `{}` is fine;
    anything else is refused as a body with unknown fields would be, so that a client never
    believes a body it sent did something."""
    if not request.body_exists:
        return
    raw = await read_body(request)
    if not raw:
        return
    _require_json_type(request)
    data = _decode(raw)
    if not isinstance(data, dict):
        raise ValidationFailed([FieldError("body", "this endpoint takes no body, or {}")])
    if data:
        raise ValidationFailed([FieldError(f"body.{name}", "unknown field") for name in data])


def _decode(raw: bytes) -> Any:
    """Parse a JSON body: UTF-8, no repeated keys, no NUL in strings, nested no deeper than
    a stored value may be (plus the levels a body wraps it in), numbers within 64-bit
    integers' range (domain/json_values.py)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in exc.msg:  # orjson's own limit, 1,024 levels
            raise _too_deep(raw) from exc
        if "infinity" in exc.msg:  # 1e400: no double holds it
            path = _number_path(raw) or "body"
            raise ValidationFailed([FieldError(path, NUMBER_PROBLEM)]) from exc
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc.msg}") from exc
    if isinstance(data, dict | list):
        shape = _shape(data)
        if shape is None:
            raise _too_deep(raw)
        keys, numbers_in_range = shape
        # An integer literal beyond 64 bits is a float once parsed: found in the text, by its
        # digits (19 or more), then named by a parse that keeps every literal as written.
        if not numbers_in_range or _LONG_DIGITS.search(raw):
            problem = _number_path(raw)
            if problem is not None:
                raise ValidationFailed([FieldError(problem, NUMBER_PROBLEM)])
        if _may_repeat_keys(raw, keys) and _has_duplicate_keys(raw):
            raise ApiError(400, "invalid_json", "the body repeats a key in one object")
    if b"u0000" in raw:
        nul = _nul_path(data, "body")
        if nul is not None:
            raise ValidationFailed([FieldError(nul, "strings must not contain NUL (\\u0000)")])
    return data


def _nul_path(value: Any, path: str) -> str | None:
    """Where the first string holding NUL is (`body.headers.X-A`; an object's path when one
    of its keys holds it), or None. Postgres text cannot hold NUL; refuse it at the door,
    naming the field, rather than fail in the store."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = path if "\x00" in key else _nul_path(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}.{index}")
            if found is not None:
                return found
    return None


# A key's closing quote and its colon: a `"` not escaped (an even run of backslashes before
# it), then white space, then `:`. Inside a string a `"` is always escaped, so this is found
# once per key of the text, and nowhere else.
_KEY_END = re.compile(rb'(\\*)"[ \t\r\n]*:')
# The same in a text without backslashes: a pattern that starts with its literal is searched
# for, instead of tried at every byte.
_PLAIN_KEY_END = re.compile(rb'"[ \t\r\n]*:')


# How deep a body may nest: a stored value's limit, plus the levels a body wraps such a value
# in (the deepest: `{"events": [{"data": ...}]}`, 3). The value's own limit is checked, and
# named, by the model of the field (api/models.py); this bound keeps every walk of a body
# (these checks, the model's, the fingerprint's) short, whatever was sent.
ENVELOPE_DEPTH = 3
MAX_BODY_DEPTH = MAX_JSON_DEPTH + ENVELOPE_DEPTH
# 19 digits or more: where an integer beyond 64 bits (2^63 has 19) may be written.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _shape(value: Any) -> tuple[int, bool] | None:
    """The keys of a parsed JSON value (every object's at every depth), and whether every
    float in it is within range; None when it nests deeper than MAX_BODY_DEPTH. One
    iterative walk: a body's depth is the sender's to choose."""
    count = 0
    numbers_in_range = True
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            if level > MAX_BODY_DEPTH:
                return None
            count += len(item)
            stack.extend((inner, level + 1) for inner in item.values())
        elif isinstance(item, list):
            if level > MAX_BODY_DEPTH:
                return None
            stack.extend((inner, level + 1) for inner in item)
        elif type(item) is float and not in_range(item):
            numbers_in_range = False
    return count, numbers_in_range


def _may_repeat_keys(raw: bytes, counted: int) -> bool:
    """False when the text has exactly as many keys as the parsed value: nothing repeated
    (a repeated key leaves the parsed object with fewer). A scan, not a second parse: most of
    the cost of reading a body was the stdlib parse of `_has_duplicate_keys`, now run only
    when the counts differ."""
    if b"\\" not in raw:  # no escapes: every quote before a colon ends a key
        written = len(_PLAIN_KEY_END.findall(raw))
    else:
        written = sum(len(m.group(1)) % 2 == 0 for m in _KEY_END.finditer(raw))
    return written != counted


# The tokens of a JSON text that tell where a value is: a string (a key when a colon follows
# it), an opening or closing bracket, a comma. Inside a string every `"` is escaped.
_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"[ \t\r\n]*(:)?|[\[\]{},]', re.DOTALL)


def _too_deep(raw: bytes) -> ValidationFailed:
    """The refusal of a body nested deeper than MAX_BODY_DEPTH, naming the field that does
    (`body.data`, `body.events[3].data`). Found by a scan of the text, which needs no parse
    (a body too deep for the parser is named too)."""
    path: list[str | int] = []
    kinds: list[bytes] = []
    for token in _TOKEN.finditer(raw):
        text = token.group(0)
        if text in (b"{", b"["):
            kinds.append(text)
            if len(kinds) > MAX_BODY_DEPTH:
                break
            path.append(0 if text == b"[" else "")
        elif text in (b"}", b"]"):
            if kinds:
                kinds.pop()
                path.pop()
        elif text == b",":
            if kinds and kinds[-1] == b"[":
                path[-1] = int(path[-1]) + 1
        elif token.group(2) and kinds:  # a key
            try:
                path[-1] = json.loads(b'"' + token.group(1) + b'"')
            except ValueError:
                path[-1] = "?"
    return ValidationFailed([FieldError(_field_of(path), DEPTH_PROBLEM)])


def _field_of(path: list[str | int]) -> str:
    """The field a path within the body is in, as the contract names it: its first key, and
    through a list of objects the key in the item (`body.events[3].data`)."""
    name = "body"
    if not path or not isinstance(path[0], str):
        return name
    name += f".{path[0]}"
    rest = path[1:]
    while len(rest) >= 2 and isinstance(rest[0], int) and isinstance(rest[1], str):
        name += f"[{rest[0]}].{rest[1]}"
        rest = rest[2:]
    return name


class _OutOfRange:
    """A number beyond MIN_NUMBER..MAX_NUMBER, as `_number_path`'s parse leaves it."""


def _number_path(raw: bytes) -> str | None:
    """Where the first number beyond 64-bit integers' range is (`body.data.count`), or None.
    A parse that keeps every literal as written, run only when the fast checks suspect one
    (the body is no deeper than MAX_BODY_DEPTH by then, or fails the same way at its
    start)."""

    def number(text: str) -> int | float | _OutOfRange:
        value = float(text) if any(c in text for c in ".eE") else int(text)
        return value if in_range(value) else _OutOfRange()

    try:
        parsed = json.loads(raw, parse_int=number, parse_float=number)
    except (ValueError, RecursionError):
        return "body"
    stack: list[tuple[Any, str]] = [(parsed, "body")]
    while stack:  # depth first, in the text's order: the first such number is named
        item, path = stack.pop()
        if isinstance(item, _OutOfRange):
            return path
        if isinstance(item, dict):
            stack.extend((inner, f"{path}.{key}") for key, inner in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(
                (inner, f"{path}.{index}") for index, inner in reversed(list(enumerate(item)))
            )
    return None


def _has_duplicate_keys(raw: bytes) -> bool:
    """orjson keeps the last of repeated keys silently; we refuse them instead, so that two
    parsers (a proxy, us) can never read different values from one body."""
    duplicate = False

    def check(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal duplicate
        if len({key for key, _ in pairs}) != len(pairs):
            duplicate = True
        return dict(pairs)

    try:
        json.loads(raw, object_pairs_hook=check)
    except RecursionError as exc:
        raise ApiError(400, "invalid_json", "the body is nested too deeply") from exc
    return duplicate


async def parse_body(request: web.Request, model: type[ModelT]) -> ModelT:
    """Read and validate a JSON object body; unknown fields are rejected."""
    return validate(model, await read_object(request), "body")


async def read_object(request: web.Request) -> dict[str, Any]:
    """Read a JSON body that must be an object (not yet validated against a model)."""
    data = await read_json(request)
    if not isinstance(data, dict):
        raise ValidationFailed([FieldError("body", "the body must be a JSON object")])
    return data


def validate(
    model: type[ModelT], data: dict[str, Any], root: str, *, brackets: bool = False
) -> ModelT:
    """`data` as a `model`, or a 400 naming each field at fault from `root`. A list's items
    are named `.0` (`body.media.0.url`), or with `brackets` `[0]` (`body.events[3].type`, as
    the batch's contract names its events)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [_field_error(root, err, brackets) for err in exc.errors()]
        raise ValidationFailed(errors) from exc


def _field_error(root: str, err: Any, brackets: bool = False) -> FieldError:
    path = root
    for part in err["loc"]:
        path += f"[{part}]" if brackets and isinstance(part, int) else f".{part}"
    kind = err["type"]
    if kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "missing":
        message = "field required"
    elif err.get("input", ...) is None and len(err["loc"]) == 1:
        message = "must not be null"  # a field (of the body itself) that may not be null
    else:
        message = str(err["msg"]).removeprefix("Value error, ")
    return FieldError(path, message)


# Requests aiohttp's HTTP parser refuses (unknown method, a header or request line over 8190
# bytes, too many headers, broken framing, TLS on the plain port) never reach a middleware:
# the protocol answers them itself with `RequestHandler.handle_error`, in text/plain and
# without a request id. aiohttp has no supported hook for that answer (aio-libs/aiohttp#3287),
# so the protocol class is replaced for this app's servers (api/framework/connections.py, which also
# holds connections to their time bounds); see docs/api.md for what remains out of reach.
_PARSER_REASON = re.compile(r"[A-Za-z][A-Za-z -]{0,79}")


def _protocol_error(status: int, exc: BaseException | None) -> ApiError:
    """The answer to a request refused below the app; it never echoes the bytes sent."""
    if status >= 500:
        return ApiError(status, "internal_error", from_domain(DispatcherError()).message)
    if isinstance(exc, http_exceptions.LineTooLong):
        limit = exc.args[1] if len(exc.args) > 1 else "the limit of"
        message = f"the request line or a header is longer than {limit} bytes"
    elif isinstance(exc, http_exceptions.BadHttpMethod):
        message = (
            "this port speaks plain HTTP, and the request looks like TLS (https)"
            if "HTTPS" in exc.message
            else "the request does not start with an HTTP method this server knows"
        )
    elif isinstance(exc, http_exceptions.BadStatusLine):
        message = "the request line is malformed; expected `METHOD /path HTTP/1.1`"
    else:
        # aiohttp's messages quote the offending bytes after a colon; only the reason before
        # it is kept, and only when it is plain words.
        reason = (getattr(exc, "message", "") or "").split("\n", 1)[0].split(":", 1)[0].strip()
        message = "the HTTP request is malformed"
        if _PARSER_REASON.fullmatch(reason):
            message += f": {reason[0].lower()}{reason[1:]}"
    return ApiError(status, "bad_request" if status == 400 else "http_error", message)


class ShapedErrorProtocol(web.RequestHandler):
    """aiohttp's per-connection protocol, answering what its parser refuses in the one error
    shape (JSON, `trace` = a fresh `X-Request-Id`: the request's own headers are not known)."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            # Part of an answer is out already: nothing sound can follow it (aiohttp's rule).
            raise ConnectionError("an answer was already partly sent; closing the connection")
        trace = uuid.uuid4().hex
        error = _protocol_error(status, exc)
        if status >= 500:
            self.log_exception("Error handling request", exc_info=exc)
            log.error("api.unhandled", trace=trace, error=type(exc).__name__)
        else:
            log.info(
                "api.refused",
                status=status,
                error=type(exc).__name__,
                reason=error.message,
                request_id=trace,
            )
        response = error_response(error, trace, {REQUEST_ID_HEADER: trace})
        response.force_close()
        return response


class ShapedErrorServer(web.Server):
    """A web.Server whose connections speak ShapedErrorProtocol."""

    @classmethod
    def like(cls, server: web.Server) -> Self:
        """The same server (handler, request factory, protocol settings), reshaped."""
        return cls(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            loop=server._loop,
            **server._kwargs,
        )

    def __call__(self) -> web.RequestHandler:
        return ShapedErrorProtocol(self, loop=self._loop, **self._kwargs)
