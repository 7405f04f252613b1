"""OpenTelemetry traces of the API, of publishing and of the engine: optional, free when off.

Installed with the `otel` extra (`pip install 'dispatcher[otel]'`) and switched on by the
standard variables: `OTEL_TRACES_EXPORTER` (`otlp`, `console`, `none`, as the SDK documents
it), or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
alone, which means `otlp`; `OTEL_SDK_DISABLED=true` keeps it off. The SDK reads everything
else itself (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`,
`OTEL_BSP_*`, headers, timeouts...), and OTLP spans leave in batches over OTLP/HTTP (protobuf).

Off (no extra, nothing asked, `none`, `OTEL_SDK_DISABLED=true`), `ENABLED` stays False and
every hook in the hot paths is one test of it: no span object, no context propagation, not
even an import of OpenTelemetry (importing it takes a tenth of a second); the API does not
even register its tracing middleware. On, the spans follow the semantic conventions
(docs/operations.md, "Tracing"):

- each API request: a SERVER span `{method} {route}`, child of an incoming W3C `traceparent`;
- `dispatcher.publish` (PRODUCER) around every publish made in Python, whatever the door;
  its W3C traceparent is stored with the event (`events.trace_context`), so that
- `dispatcher.attempt` (CLIENT), one per attempt, links to it: across processes and time,
  the attempt of an event is found from the request that published it, and back;
- `dispatcher.claim` and `dispatcher.record`, one per engine batch; a claim's attempts are
  its children.

Like metrics.py, this module imports nothing from the package, so that every layer may use it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from functools import wraps
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar
from urllib.parse import SplitResult, urlsplit, urlunsplit

import structlog

if TYPE_CHECKING:
    from opentelemetry.context import Context as Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span as Span
    from opentelemetry.trace import Tracer

log = structlog.get_logger("dispatcher.tracing")

# True while spans are being made. The hooks test it before anything else (the fast path).
ENABLED = False

INSTRUMENTATION = "dispatcher"
DEFAULT_SERVICE_NAME = "dispatcher"
# The variables that say where spans go; without either, tracing stays off.
ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

# HTTP methods the semantic conventions name; any other is reported as `_OTHER`.
KNOWN_METHODS: Final = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
# The one shape of traceparent this module writes (W3C trace context, version 00).
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


class _Spans:
    """The OpenTelemetry names the hooks use, imported once when tracing is enabled (an
    import in every hook would cost more than the span)."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import (
            INVALID_SPAN,
            Link,
            SpanContext,
            SpanKind,
            Status,
            StatusCode,
            TraceFlags,
        )

        self.tracer = tracer
        self.extract = propagate.extract  # the configured propagators (W3C by default)
        self.in_context = trace.set_span_in_context
        self.Link = Link
        self.SpanContext = SpanContext
        self.TraceFlags = TraceFlags
        self.Status = Status
        self.ERROR = StatusCode.ERROR
        self.SERVER = SpanKind.SERVER
        self.CLIENT = SpanKind.CLIENT
        self.PRODUCER = SpanKind.PRODUCER
        self.INTERNAL = SpanKind.INTERNAL
        self.NO_SPAN = INVALID_SPAN


# Kept by `disable`: a span started before it can still end.
_spans: _Spans | None = None
_provider: TracerProvider | None = None  # the one `configure` made: flushed by `shutdown`

P = ParamSpec("P")
R = TypeVar("R")


def _active() -> _Spans:
    assert _spans is not None, "a tracing hook was called before tracing was enabled"
    return _spans


def _never_raising(fallback: Callable[[], R]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Tracing must never cost an attempt or a record: a hook that fails (a bug, an exotic
    URL) logs it and gives `fallback()` (a span that records nothing) instead of raising
    into the engine."""

    def decorate(hook: Callable[P, R]) -> Callable[P, R]:
        @wraps(hook)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return hook(*args, **kwargs)
            except Exception:
                log.exception("tracing.hook_failed", hook=hook.__name__)
                return fallback()

        return guarded

    return decorate


def _no_span() -> Span:
    return _active().NO_SPAN


def _no_parent() -> Context | None:
    return None


# -- switching it on and off -------------------------------------------------------------


def trace_exporters(env: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for, by OpenTelemetry's rules: `OTEL_TRACES_EXPORTER`,
    a comma-separated list (`otlp`, `console`, `none`; lower-cased, blanks and repeats
    dropped), empty when it says `none` or when `OTEL_SDK_DISABLED` is true. Unset (or
    blank), the SDK's default `otlp` applies only where an OTLP endpoint is set: a process
    nobody asked to trace does not send spans to a collector that is not there."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    named = list(dict.fromkeys(n for n in named if n))
    if not named:
        return ["otlp"] if any(env.get(v) for v in ENDPOINT_VARIABLES) else []
    if "none" in named:
        return []
    return named


def _console_line(span: Any) -> str:
    """A finished span as one line of JSON: the process's output stays one JSON object per
    line (the SDK's own format spans many lines)."""
    return str(span.to_json(indent=None)) + "\n"


def configure() -> bool:
    """Turn tracing on from the OTEL_* environment, when it asks for it; True when on.

    The exporters are `trace_exporters`'s: `otlp` (OTLP/HTTP protobuf, to the endpoint the
    SDK reads from `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`), `console` (each span a JSON line
    on standard output); one it does not ship (`zipkin`, ...) is named in a warning and left
    out. Off when none is left, when `OTEL_SDK_DISABLED` is true, and (with a warning) when
    the `otel` extra is not installed. The service name defaults to `dispatcher` (set
    `OTEL_SERVICE_NAME` or `service.name` in `OTEL_RESOURCE_ATTRIBUTES` to change it).
    """
    global _provider
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        if any(env.get(v) for v in ("OTEL_TRACES_EXPORTER", *ENDPOINT_VARIABLES)):
            log.info("tracing.off", reason="OTEL_SDK_DISABLED is true")
        return False
    named = trace_exporters(env)
    if not named:
        if "none" in env.get("OTEL_TRACES_EXPORTER", "").lower():
            log.info("tracing.off", reason="OTEL_TRACES_EXPORTER is none")
        return False
    unknown = [n for n in named if n not in ("otlp", "console")]
    if unknown:
        log.warning(
            "tracing.exporter_unknown",
            exporters=unknown,
            reason="OTEL_TRACES_EXPORTER names exporters this service does not ship",
            shipped=["otlp", "console", "none"],
        )
    named = [n for n in named if n not in unknown]
    if not named:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        exporters: list[Any] = []
        if "otlp" in named:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
    except ImportError as exc:
        log.warning(
            "tracing.unavailable",
            reason=f"tracing is asked for, but OpenTelemetry is not installed ({exc.name})",
            fix="pip install 'dispatcher[otel]'",
        )
        return False
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # No exit hook of the SDK's: `shutdown` flushes, once, where the process stops.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    if "console" in named:
        # Written as each span ends: a line is not held back in a batch (a debugging aid).
        console = ConsoleSpanExporter(formatter=_console_line)
        provider.add_span_processor(SimpleSpanProcessor(console))
    trace.set_tracer_provider(provider)  # for any other instrumentation in the process
    _provider = provider
    enable(provider)
    endpoint = next((env[v] for v in ENDPOINT_VARIABLES if env.get(v)), None)
    log.info(
        "tracing.enabled",
        exporters=named,
        endpoint=_without_secrets(urlsplit(endpoint)) if endpoint and "otlp" in named else None,
        service=resource.attributes.get(SERVICE_NAME),
        sampler=type(provider.sampler).__name__,
    )
    return True


def enable(provider: TracerProvider) -> None:
    """Make spans with `provider` from now on (the tests give one with an in-memory
    exporter). Apps created before this call have no request spans (see create_app)."""
    global ENABLED, _spans
    from dispatcher import __version__

    _spans = _Spans(provider.get_tracer(INSTRUMENTATION, __version__))
    ENABLED = True


def disable() -> None:
    """Stop making spans (spans already started still end)."""
    global ENABLED
    ENABLED = False


def shutdown() -> None:
    """Stop, and send what is still buffered (blocking: up to the exporter's timeout)."""
    global _provider
    disable()
    provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


# -- the API -------------------------------------------------------------------------------


@contextmanager
def serving(
    method: str,
    route: str | None,
    *,
    path: str,
    scheme: str,
    host: str | None,
    port: int | None,
    headers: Mapping[str, str],
) -> Iterator[Span]:
    """The current span of one API request: SERVER, named `{method} {route}` (`{method}`
    when no route matched), child of the request's `traceparent` when it has one."""
    spans = _active()
    known = method if method in KNOWN_METHODS else "_OTHER"
    attributes: dict[str, Any] = {
        "http.request.method": known,
        "url.path": path,
        "url.scheme": scheme,
    }
    if known != method:
        attributes["http.request.method_original"] = method
    if route is not None:
        attributes["http.route"] = route
    if host:
        attributes["server.address"] = host
        attributes["server.port"] = port or _DEFAULT_PORTS.get(scheme, 80)
    # Exceptions are the caller's to judge (`answered`, `failed`): a redirect raised is not one.
    with spans.tracer.start_as_current_span(
        f"{known} {route}" if route is not None else known,
        context=spans.extract(headers),
        kind=spans.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def answered(span: Span, status: int) -> None:
    """The request's answer: a 5xx is the server's error (a 4xx is the client's)."""
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(_active().Status(_active().ERROR))


# -- publishing ----------------------------------------------------------------------------


class Publication:
    """What a publish statement needs from its span: the traceparent to store with its
    events (None when tracing is off or the span is not sampled), and where to say how many
    deliveries it made. Off, `publishing` returns the one shared instance without a span,
    which does nothing: one class for both, so that the way a publish ends is written once."""

    __slots__ = ("span", "traceparent")

    def __init__(self, span: Span | None = None) -> None:
        self.span = span
        self.traceparent = None if span is None else _traceparent(span)

    def __enter__(self) -> Publication:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.span is not None:
            _ended(self.span, error)

    def fanned_out(self, deliveries: int) -> None:
        """The deliveries the publish made (`dispatcher.fanout.count`)."""
        if self.span is not None:
            self.span.set_attribute("dispatcher.fanout.count", deliveries)


_UNTRACED: Final = Publication()


def publishing(
    source: str, event_type: str | None, event_id: str | None = None, events: int = 1
) -> AbstractContextManager[Publication]:
    """The `dispatcher.publish` span of one publish (one event, or a batch of `events`),
    child of the current span (the API request's, when there is one)."""
    if not ENABLED:
        return _UNTRACED
    return _publication(source, event_type, event_id, events)


@_never_raising(lambda: _UNTRACED)
def _publication(
    source: str, event_type: str | None, event_id: str | None, events: int
) -> Publication:
    spans = _active()
    attributes: dict[str, Any] = {"dispatcher.event.source": source}
    if event_type is not None:
        attributes["dispatcher.event.type"] = event_type
    if event_id is not None:
        attributes["dispatcher.event.id"] = event_id
    if events != 1:
        attributes["dispatcher.event.count"] = events
    span = spans.tracer.start_span("dispatcher.publish", kind=spans.PRODUCER, attributes=attributes)
    return Publication(span)


# -- the engine ----------------------------------------------------------------------------


@_never_raising(_no_parent)
def claimed(took: float, size: int, asked: int) -> Context | None:
    """A `dispatcher.claim` span for a claim that took `took` seconds, just now, and found
    `size` deliveries; returns the context its attempts start in (their parent). Claims that
    find nothing make no span: an idle engine would otherwise make one per poll."""
    spans = _active()
    now = time.time_ns()
    span = spans.tracer.start_span(
        "dispatcher.claim",
        kind=spans.INTERNAL,
        attributes={"dispatcher.batch.size": size, "dispatcher.claim.limit": asked},
        start_time=now - int(took * 1e9),
    )
    span.end(end_time=now)
    return spans.in_context(span)


@_never_raising(_no_span)
def attempt_started(
    parent: Context | None,
    *,
    url: str,
    delivery_id: str,
    webhook_id: str,
    event_id: str,
    attempt: int,
    trace_context: str | None,
) -> Span:
    """The `dispatcher.attempt` span of one attempt (CLIENT), linked to the publish of its
    event (`trace_context`, stored with the event) when that one was traced."""
    spans = _active()
    parts = urlsplit(url)
    attributes: dict[str, Any] = {
        "http.request.method": "POST",
        "url.full": _without_secrets(parts),
        "dispatcher.delivery.id": delivery_id,
        "dispatcher.webhook.id": webhook_id,
        "dispatcher.event.id": event_id,
        "dispatcher.attempt.number": attempt,
    }
    try:
        if parts.hostname:
            attributes["server.address"] = parts.hostname
            attributes["server.port"] = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
    except ValueError:  # a port out of range: the attempt will say so itself
        pass
    if attempt > 1:
        attributes["http.request.resend_count"] = attempt - 1
    links = []
    if trace_context is not None and _TRACEPARENT.fullmatch(trace_context):
        # Read here rather than by a propagator: this module wrote it, in this one shape.
        published = spans.SpanContext(
            trace_id=int(trace_context[3:35], 16),
            span_id=int(trace_context[36:52], 16),
            is_remote=True,
            trace_flags=spans.TraceFlags(int(trace_context[53:55], 16)),
        )
        if published.is_valid:
            links.append(spans.Link(published))
    return spans.tracer.start_span(
        "dispatcher.attempt", context=parent, kind=spans.CLIENT, attributes=attributes,
        links=links,
    )  # fmt: skip


@_never_raising(lambda: None)
def attempt_ended(span: Span, outcome: str, status: int | None, error: str | None) -> None:
    """How the attempt ended; anything but a success is an error of the span."""
    spans = _active()
    outcome = str(outcome)
    span.set_attribute("dispatcher.attempt.outcome", outcome)
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    if outcome != "success":
        span.set_attribute("error.type", str(status) if status is not None else outcome)
        span.set_status(spans.Status(spans.ERROR, error))
    span.end()


@_never_raising(_no_span)
def record_started(size: int) -> Span:
    """The `dispatcher.record` span of one batch of results written."""
    spans = _active()
    return spans.tracer.start_span(
        "dispatcher.record", kind=spans.INTERNAL, attributes={"dispatcher.batch.size": size}
    )


@_never_raising(lambda: None)
def record_ended(span: Span, error: BaseException | None = None) -> None:
    _ended(span, error)


def failed(span: Span, error: BaseException) -> None:
    """`span`'s work ended with `error` raised: recorded, and the span is an error."""
    _failed(span, error)


# -- helpers -------------------------------------------------------------------------------


def _traceparent(span: Span) -> str | None:
    """The W3C traceparent of `span`; None when it is invalid or not sampled (not exported)."""
    context = span.get_span_context()
    if not (context.is_valid and context.trace_flags.sampled):
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _ended(span: Span, error: BaseException | None) -> None:
    """The end of a span around some work (a batch recorded, a publish): an error if the
    work raised `error`."""
    if error is not None:
        _failed(span, error)
    span.end()


def _failed(span: Span, error: BaseException) -> None:
    spans = _active()
    span.record_exception(error)
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(spans.Status(spans.ERROR, str(error) or type(error).__name__))


def _without_secrets(parts: SplitResult) -> str:
    """A URL without its query, fragment and credentials: what a span or a log may show of an
    address (a webhook's query often carries a token)."""
    _, at, host = parts.netloc.rpartition("@")
    netloc = "REDACTED:REDACTED@" + host if at else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
