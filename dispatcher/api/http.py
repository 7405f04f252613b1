"""Responses, the one error shape, request ids, and reading JSON bodies."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, TypeVar

import orjson
import structlog
from aiohttp import web
from pydantic import BaseModel, ValidationError

from dispatcher import metrics
from dispatcher.errors import (
    Conflict,
    DatabaseUnavailable,
    DispatcherError,
    FieldError,
    Forbidden,
    InvalidCursor,
    NotFound,
    Unauthorized,
    ValidationFailed,
)

ModelT = TypeVar("ModelT", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 1024 * 1024
REQUEST_ID_HEADER = "X-Request-Id"
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
        errors: list[dict[str, str]] | None = None,
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


def error_body(error: ApiError, trace: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": error.status,
        "code": error.code,
        "title": HTTPStatus(error.status).phrase,
        "message": error.message,
    }
    if error.errors:
        body["errors"] = error.errors
    body["trace"] = trace
    return body


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
    if isinstance(exc, InvalidCursor):
        return ApiError(400, "invalid_cursor", exc.message)
    if isinstance(exc, Unauthorized):
        return ApiError(401, "unauthorized", exc.message, headers={"WWW-Authenticate": "Bearer"})
    if isinstance(exc, Forbidden):
        return ApiError(403, "forbidden", exc.message)
    if isinstance(exc, DatabaseUnavailable):
        return ApiError(503, "unavailable", "the service is temporarily unavailable; retry shortly",
                        headers={"Retry-After": "1"})  # fmt: skip
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
    return incoming if _REQUEST_ID_SHAPE.match(incoming) else uuid.uuid4().hex


def route_template(request: web.Request) -> str:
    """The route as declared (`/v1/webhooks/{webhook_id}`): bounded, and free of ids."""
    info = request.match_info
    resource = info.route.resource if info is not None and info.route is not None else None
    return resource.canonical if resource is not None else "unmatched"


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
    metrics.HTTP_REQUESTS.labels(route, request.method, str(response.status)).inc()
    metrics.HTTP_DURATION.labels(route, request.method).observe(elapsed)
    log.info(
        "api.request",
        method=request.method,
        route=route,
        status=response.status,
        duration_ms=round(elapsed * 1000, 2),
        request_id=trace,
    )
    return response


def _error_response(error: ApiError, trace: str) -> web.Response:
    return json_response(error_body(error, trace), status=error.status, headers=error.headers)


async def read_json(request: web.Request) -> Any:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
    if request.content_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as application/json")
    raw = await request.read()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc.msg}") from exc
    if isinstance(data, dict | list) and _has_duplicate_keys(raw):
        raise ApiError(400, "invalid_json", "the body repeats a key in one object")
    if b"u0000" in raw and _contains_nul(data):
        raise ValidationFailed([FieldError("body", "strings must not contain NUL (\\u0000)")])
    return data


def _contains_nul(value: Any) -> bool:
    """Postgres text cannot hold NUL; refuse it at the door rather than fail in the store."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_contains_nul(v) for v in value)
    return False


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
    data = await read_json(request)
    if not isinstance(data, dict):
        raise ValidationFailed([FieldError("body", "the body must be a JSON object")])
    return validate(model, data, "body")


def validate(model: type[ModelT], data: dict[str, Any], root: str) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed([_field_error(root, err) for err in exc.errors()]) from exc


def _field_error(root: str, err: Any) -> FieldError:
    path = ".".join([root, *(str(part) for part in err["loc"])])
    kind = err["type"]
    if kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "missing":
        message = "field required"
    else:
        message = str(err["msg"]).removeprefix("Value error, ")
    return FieldError(path, message)
