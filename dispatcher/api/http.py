"""Responses, the one error shape, request ids, and reading JSON bodies (or their absence).

The error shape also covers requests aiohttp's own HTTP parser refuses before any middleware
runs (see ShapedErrorProtocol).
"""

from __future__ import annotations

import functools
import json
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, TypeVar

import orjson
import structlog
from aiohttp import http_exceptions, web
from pydantic import BaseModel, ValidationError

from dispatcher import metrics, tracing
from dispatcher.api.resources import ErrorBody, ErrorDetail
from dispatcher.errors import (
    Conflict,
    DatabaseUnavailable,
    DispatcherError,
    FieldError,
    Forbidden,
    IdempotencyKeyReused,
    InvalidCursor,
    NotFound,
    Overloaded,
    Unauthorized,
    ValidationFailed,
)

ModelT = TypeVar("ModelT", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 1024 * 1024
REQUEST_ID_HEADER = "X-Request-Id"
# Seconds a client is told to wait after a 503 (`unavailable`, `overloaded`): short, since
# both pass quickly; a client that spreads its retries (jitter) helps the process recover.
RETRY_AFTER = "1"
TRACE = web.RequestKey("trace", str)
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
    if isinstance(exc, DatabaseUnavailable):
        return ApiError(503, "unavailable", "the service is temporarily unavailable; retry shortly",
                        headers={"Retry-After": RETRY_AFTER})  # fmt: skip
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
    except Exception:
        log.exception("api.unhandled", trace=trace, method=request.method, path=request.path)
        response = _error_response(from_domain(DispatcherError()), trace)
    response.headers[REQUEST_ID_HEADER] = trace
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


def _error_response(error: ApiError, trace: str) -> web.Response:
    return json_response(error_body(error, trace), status=error.status, headers=error.headers)


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


async def _read_raw(request: web.Request) -> bytes:
    _check_length(request)
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
    return _decode(await _read_raw(request))


async def read_no_body(request: web.Request) -> None:
    """For endpoints that take no body: nothing (whatever the content type) or `{}` is fine;
    anything else is refused as a body with unknown fields would be, so that a client never
    believes a body it sent did something."""
    if not request.body_exists:
        return
    raw = await _read_raw(request)
    if not raw:
        return
    _require_json_type(request)
    data = _decode(raw)
    if not isinstance(data, dict):
        raise ValidationFailed([FieldError("body", "this endpoint takes no body, or {}")])
    if data:
        raise ValidationFailed([FieldError(f"body.{name}", "unknown field") for name in data])


def _decode(raw: bytes) -> Any:
    """Parse a JSON body: UTF-8, no repeated keys, no NUL in strings."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc.msg}") from exc
    if isinstance(data, dict | list) and _may_repeat_keys(raw, data) and _has_duplicate_keys(raw):
        raise ApiError(400, "invalid_json", "the body repeats a key in one object")
    if b"u0000" in raw:
        path = _nul_path(data, "body")
        if path is not None:
            raise ValidationFailed([FieldError(path, "strings must not contain NUL (\\u0000)")])
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


# Deeper than this, the fast count steps aside: the full check decides, as it always did (it
# refuses a body nested past the interpreter's recursion limit).
_COUNTED_DEPTH = 200


def _key_count(value: Any) -> int | None:
    """Keys in a parsed JSON value, every object's at every depth (None: nested deeper than
    `_COUNTED_DEPTH`). Iterative: a body's depth is the sender's to choose."""
    count = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _COUNTED_DEPTH:
            return None
        if isinstance(item, dict):
            count += len(item)
            stack.extend((inner, depth + 1) for inner in item.values())
        elif isinstance(item, list):
            stack.extend((inner, depth + 1) for inner in item)
    return count


def _may_repeat_keys(raw: bytes, data: Any) -> bool:
    """False when the text has exactly as many keys as the parsed value: nothing repeated
    (a repeated key leaves the parsed object with fewer). A scan, not a second parse: most of
    the cost of reading a body was the stdlib parse of `_has_duplicate_keys`, now run only
    when the counts differ."""
    if b"\\" not in raw:  # no escapes: every quote before a colon ends a key
        written = len(_PLAIN_KEY_END.findall(raw))
    else:
        written = sum(len(m.group(1)) % 2 == 0 for m in _KEY_END.finditer(raw))
    counted = _key_count(data)
    return counted is None or written != counted


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
# so the protocol class is replaced for this app's servers; see docs/api.md for what remains
# out of reach.
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
        response = json_response(
            error_body(error, trace),
            status=error.status,
            headers={**error.headers, REQUEST_ID_HEADER: trace},
        )
        response.force_close()
        return response


class ShapedErrorServer(web.Server):
    """A web.Server whose connections speak ShapedErrorProtocol."""

    @classmethod
    def like(cls, server: web.Server) -> ShapedErrorServer:
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


def shape_parser_errors(app: web.Application) -> None:
    """Make every server aiohttp builds for `app` a ShapedErrorServer, whoever runs it
    (`dispatcher serve`'s AppRunner, the tests' TestServer).

    Every runner builds its server with the app's `_make_handler`; wrapping that one method on
    this instance is the narrowest place aiohttp 3.14 leaves. `object.__setattr__` because
    Application.__setattr__ warns about custom attributes in debug mode, and this one is
    deliberate.
    """
    build = app._make_handler

    def make_handler(**kwargs: Any) -> web.Server:
        return ShapedErrorServer.like(build(**kwargs))

    object.__setattr__(app, "_make_handler", make_handler)
