"""Traces, as an OpenTelemetry backend would receive them: the spans of a request, of every
publish, of the engine's claims, attempts and records, named and attributed after the semantic
conventions; an attempt's span linked to the publish of its event; nothing at all when off.

Spans are caught with the SDK's in-memory exporter; the API, the engine and the receiver are
real, on loopback, against real Postgres.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from dispatcher import tracing
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import Services
from dispatcher.api.framework.http import tracing_middleware
from dispatcher.carrier import SandboxCarrier
from dispatcher.store.database import Database
from tests.conftest import Workspace, wait_for
from tests.engine.helpers import attempted, subscribe
from tests.receiver import EngineFactory, Receiver, answer

# An incoming W3C trace context, as a caller's own tracing would send it.
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for one test, every span ended kept in memory (exported as it ends)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    yield exporter
    tracing.disable()
    provider.shutdown()


@pytest.fixture
async def client(
    spans: InMemorySpanExporter, services: Services
) -> AsyncIterator[TestClient[Any, Any]]:
    """The API, made once tracing is on (an app registers its tracing middleware then)."""
    async with TestClient(TestServer(create_app(services), host="127.0.0.1")) as test_client:
        yield test_client


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    """(trace id, span id) as W3C writes them."""
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def parent_of(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


async def ended(
    exporter: InMemorySpanExporter, name: str, count: int = 1
) -> Sequence[ReadableSpan]:
    """The spans called `name`, once `count` of them have ended."""
    await wait_for(lambda: len(named(exporter, name)) >= count, message=f"{count} {name} span(s)")
    return named(exporter, name)


async def stored_trace_context(db: Database, event_id: str) -> str | None:
    async with db.acquire() as conn:
        value: str | None = await conn.fetchval(
            "SELECT trace_context FROM events WHERE id = $1", event_id
        )
    return value


async def test_a_request_its_publish_and_the_attempts_it_caused_are_linked(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
    spans: InMemorySpanExporter,
) -> None:
    first = await subscribe(client, ws, receiver.url("/one"))
    second = await subscribe(client, ws, receiver.url("/two"))
    resp = await client.post(
        "/v1/events",
        json={"type": "contact.updated", "data": {"id": "CT1"}},
        headers={**ws.headers, "traceparent": TRACEPARENT},
    )
    assert resp.status == 202, await resp.text()
    event_id = (await resp.json())["id"]
    await make_engine()
    for hook in (first, second):
        await attempted(client, ws, hook["id"])
    await ended(spans, "dispatcher.record")

    # The request: a server span under the caller's trace.
    (request,) = [s for s in named(spans, "POST /v1/events")]
    assert request.kind == SpanKind.SERVER
    assert hex_ids(request)[0] == CALLER_TRACE and parent_of(request) == CALLER_SPAN
    assert attributes(request) == {
        "http.request.method": "POST",
        "http.route": "/v1/events",
        "http.response.status_code": 202,
        "url.path": "/v1/events",
        "url.scheme": "http",
        "server.address": "127.0.0.1",
        "server.port": client.port,
    }
    assert request.status.status_code == StatusCode.UNSET

    # Its publish: a child, with the fan-out; its traceparent is stored with the event.
    (publish,) = named(spans, "dispatcher.publish")
    assert publish.kind == SpanKind.PRODUCER
    assert parent_of(publish) == hex_ids(request)[1]
    assert hex_ids(publish)[0] == CALLER_TRACE
    assert attributes(publish) == {
        "dispatcher.event.source": "api",
        "dispatcher.event.type": "contact.updated",
        "dispatcher.event.id": event_id,
        "dispatcher.fanout.count": 2,
    }
    trace_id, publish_id = hex_ids(publish)
    assert await stored_trace_context(db, event_id) == f"00-{trace_id}-{publish_id}-01"

    # The attempts: client spans, children of the claim that took them, linked to the publish.
    attempts = {
        attributes(s)["dispatcher.webhook.id"]: s for s in named(spans, "dispatcher.attempt")
    }
    assert set(attempts) == {first["id"], second["id"]}
    claims = {hex_ids(s)[1]: s for s in named(spans, "dispatcher.claim")}
    for hook, path in ((first, "/one"), (second, "/two")):
        attempt = attempts[hook["id"]]
        assert attempt.kind == SpanKind.CLIENT
        assert attempt.status.status_code == StatusCode.UNSET
        delivery = await attempted(client, ws, hook["id"])
        assert attributes(attempt) == {
            "http.request.method": "POST",
            "url.full": receiver.url(path),
            "server.address": "127.0.0.1",
            "server.port": receiver.port,
            "http.response.status_code": 200,
            "dispatcher.delivery.id": delivery["id"],
            "dispatcher.webhook.id": hook["id"],
            "dispatcher.event.id": event_id,
            "dispatcher.attempt.number": 1,
            "dispatcher.attempt.outcome": "success",
        }
        (link,) = attempt.links
        assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (
            trace_id,
            publish_id,
        )
        # Its own trace: the engine's, not the caller's (a link, not a parent).
        assert hex_ids(attempt)[0] != CALLER_TRACE
        claim = claims[parent_of(attempt) or ""]
        assert claim.kind == SpanKind.INTERNAL
        assert 1 <= attributes(claim)["dispatcher.batch.size"] <= 2
        assert attributes(claim)["dispatcher.claim.limit"] >= 2
    assert sum(attributes(c)["dispatcher.batch.size"] for c in claims.values()) == 2

    records = named(spans, "dispatcher.record")
    assert all(r.kind == SpanKind.INTERNAL for r in records)
    assert sum(attributes(r)["dispatcher.batch.size"] for r in records) == 2


async def test_requests_are_named_by_their_route_and_5xx_only_is_an_error(
    client: TestClient[Any, Any], ws: Workspace, spans: InMemorySpanExporter
) -> None:
    await client.get("/v1/webhooks/WHnope", headers=ws.headers)
    await client.get("/v1/nowhere", headers=ws.headers)
    await client.get("/v1/webhooks", headers={"Authorization": "Bearer dk_wrong"})

    (missing,) = await ended(spans, "GET /v1/webhooks/{webhook_id}")
    assert attributes(missing)["http.route"] == "/v1/webhooks/{webhook_id}"
    assert attributes(missing)["url.path"] == "/v1/webhooks/WHnope"
    assert attributes(missing)["http.response.status_code"] == 404
    assert missing.status.status_code == StatusCode.UNSET  # the client's error, not ours
    # No route matched: the method alone names it, and no route is claimed.
    (unmatched,) = await ended(spans, "GET")
    assert "http.route" not in attributes(unmatched)
    assert attributes(unmatched)["http.response.status_code"] == 404
    (refused,) = await ended(spans, "GET /v1/webhooks")
    assert attributes(refused)["http.response.status_code"] == 401
    # Without a traceparent, each request starts a trace of its own.
    assert all(s.parent is None for s in (missing, unmatched, refused))

    # A Host header that is no host[:port] is answered as ever; its span leaves it out.
    resp = await client.get("/v1/webhooks", headers={**ws.headers, "Host": "x:abc"})
    assert resp.status == 200, await resp.text()
    listed = await ended(spans, "GET /v1/webhooks", 2)
    odd = next(s for s in listed if attributes(s)["http.response.status_code"] == 200)
    assert "server.address" not in attributes(odd) and "server.port" not in attributes(odd)


async def test_a_failed_attempt_is_an_error_and_its_url_keeps_no_secret(
    client: TestClient[Any, Any],
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    spans: InMemorySpanExporter,
) -> None:
    receiver.behaviours["/down"] = answer(503)
    down = await subscribe(client, ws, receiver.url("/down") + "?token=s3cret#frag")
    # Nothing listens on port 9 of loopback: no answer at all.
    refused = await subscribe(client, ws, "http://127.0.0.1:9/hook?token=s3cret")
    resp = await client.post(
        "/v1/events", json={"type": "contact.updated", "data": {"id": "CT1"}}, headers=ws.headers
    )
    assert resp.status == 202
    engine = await make_engine(retry_schedule=(0.0,), disable_after=10**8)
    await attempted(client, ws, down["id"], 2, engine)
    await attempted(client, ws, refused["id"], 2, engine)
    await ended(spans, "dispatcher.attempt", 4)

    by_hook: dict[str, list[ReadableSpan]] = {}
    for span in named(spans, "dispatcher.attempt"):
        by_hook.setdefault(attributes(span)["dispatcher.webhook.id"], []).append(span)
    for span in by_hook[down["id"]]:
        assert attributes(span)["url.full"] == receiver.url("/down")
        assert attributes(span)["http.response.status_code"] == 503
        assert attributes(span)["error.type"] == "503"
        assert attributes(span)["dispatcher.attempt.outcome"] == "http_error"
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == "HTTP 503"
    for span in by_hook[refused["id"]]:
        assert attributes(span)["url.full"] == "http://127.0.0.1:9/hook"
        assert attributes(span)["server.port"] == 9
        assert "http.response.status_code" not in attributes(span)
        assert attributes(span)["error.type"] == "connection_error"
        assert attributes(span)["dispatcher.attempt.outcome"] == "connection_error"
        assert span.status.status_code == StatusCode.ERROR
    # The second attempt says it is a resend; both link to the one publish.
    (publish,) = named(spans, "dispatcher.publish")
    for attempts in by_hook.values():
        numbers = sorted(attributes(s)["dispatcher.attempt.number"] for s in attempts)
        assert numbers == [1, 2]
        resends = [attributes(s).get("http.request.resend_count") for s in attempts]
        assert sorted(resends, key=str) == [1, None]
        linked = {f"{link.context.span_id:016x}" for s in attempts for link in s.links}
        assert linked == {hex_ids(publish)[1]}
    everything = repr([attributes(s) for s in spans.get_finished_spans()])
    assert "s3cret" not in everything and "frag" not in everything


async def test_every_door_that_publishes_in_python_makes_a_publish_span(
    client: TestClient[Any, Any],
    ws: Workspace,
    services: Services,
    db: Database,
    spans: InMemorySpanExporter,
) -> None:
    events = ["message.received", "call.ringing", "message.delivered", "contact.updated"]
    hook = await subscribe(client, ws, "http://127.0.0.1:9/hook", events=events)
    inbound = {"from": "+15557770000", "to": ws.number, "text": "hi"}
    resp = await client.post("/v1/inbound/messages", json=inbound, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    call = {"from": "+15557770000", "to": ws.number, "status": "ringing"}
    resp = await client.post("/v1/inbound/calls", json=call, headers=ws.headers)
    assert resp.status == 201, await resp.text()
    resp = await client.post(f"/v1/webhooks/{hook['id']}/test", headers=ws.headers)
    assert resp.status in (200, 201, 202), await resp.text()
    for n in range(2):
        sent = {"from": ws.number, "to": f"+1555000000{n}", "text": "hi"}
        resp = await client.post("/v1/messages", json=sent, headers=ws.headers)
        assert resp.status == 202, await resp.text()
    carrier = SandboxCarrier(db, services.clock, delay=0.0)
    await carrier.advance()  # queued -> sent: no event
    await carrier.advance()  # sent -> delivered: one event each, in one batch

    publishes = await ended(spans, "dispatcher.publish", 4)
    by_source = {attributes(s)["dispatcher.event.source"]: s for s in publishes}
    assert sorted(attributes(s)["dispatcher.event.source"] for s in publishes) == [
        "carrier",
        "inbound",
        "inbound",
        "test",
    ]
    requests = {hex_ids(s)[1]: s.name for s in spans.get_finished_spans()}
    inbound_spans = [s for s in publishes if attributes(s)["dispatcher.event.source"] == "inbound"]
    assert sorted(requests[parent_of(s) or ""] for s in inbound_spans) == [
        "POST /v1/inbound/calls",
        "POST /v1/inbound/messages",
    ]
    assert sorted(attributes(s)["dispatcher.event.type"] for s in inbound_spans) == [
        "call.ringing",
        "message.received",
    ]
    test = by_source["test"]
    assert requests[parent_of(test) or ""] == "POST /v1/webhooks/{webhook_id}/test"
    assert attributes(test)["dispatcher.event.type"] == "webhook.test"
    assert attributes(test)["dispatcher.fanout.count"] == 1
    # The carrier publishes a batch outside any request: a trace of its own.
    batch = by_source["carrier"]
    assert batch.parent is None
    assert attributes(batch)["dispatcher.event.count"] == 2
    assert attributes(batch)["dispatcher.fanout.count"] == 2

    # Every event carries the traceparent of the span that published it.
    async with db.acquire() as conn:
        rows = await conn.fetch("SELECT type, source, trace_context FROM events")
    expected = set()
    for span in publishes:
        assert span.context is not None
        flags = f"{span.context.trace_flags:02x}"
        source = attributes(span)["dispatcher.event.source"]
        expected.add((source, "00-{}-{}-{}".format(*hex_ids(span), flags)))
    assert len(rows) == 5
    assert {(row["source"], row["trace_context"]) for row in rows} == expected


async def test_off_there_are_no_spans_no_middleware_and_no_stored_context(
    services: Services,
    ws: Workspace,
    receiver: Receiver,
    make_engine: EngineFactory,
    db: Database,
) -> None:
    assert not tracing.ENABLED
    app = create_app(services)
    assert tracing_middleware not in app.middlewares
    # Off, a publish's hook is one shared object that does nothing.
    assert tracing.publishing("api", "contact.updated") is tracing.publishing("carrier", None)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        hook = await subscribe(client, ws, receiver.url())
        resp = await client.post(
            "/v1/events",
            json={"type": "contact.updated", "data": {"id": "CT1"}},
            headers={**ws.headers, "traceparent": TRACEPARENT},
        )
        assert resp.status == 202
        event_id = (await resp.json())["id"]
        await make_engine()
        await attempted(client, ws, hook["id"])
    assert await stored_trace_context(db, event_id) is None
    assert "traceparent" not in {k.lower() for k in receiver.requests[0].headers}


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def test_without_an_endpoint_opentelemetry_is_not_even_imported() -> None:
    done = run_python(
        "import sys\n"
        "from dispatcher import service, tracing\n"
        "assert tracing.configure() is False and not tracing.ENABLED\n"
        "loaded = [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "assert not loaded, loaded\n"
    )
    assert done.returncode == 0, done.stderr


def test_without_the_extra_an_endpoint_only_warns() -> None:
    done = run_python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the otel extra were not installed\n"
        "from dispatcher import log, tracing\n"
        "log.configure('json', 'info')\n"
        "assert tracing.configure() is False and not tracing.ENABLED\n",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
    )
    assert done.returncode == 0, done.stderr
    assert "tracing.unavailable" in done.stdout + done.stderr
    assert "pip install 'dispatcher[otel]'" in done.stdout + done.stderr


def test_otel_sdk_disabled_keeps_it_off() -> None:
    done = run_python(
        "from dispatcher import tracing\nassert tracing.configure() is False\n",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_SDK_DISABLED="true",
    )
    assert done.returncode == 0, done.stderr


# -- OTEL_TRACES_EXPORTER, as the SDK documents it ------------------------------------------

# A process that traces one publish-like span and stops (flushing what is buffered).
ONE_SPAN = (
    "from dispatcher import log, tracing\n"
    "log.configure('json', 'info')\n"
    "on = tracing.configure()\n"
    "print('configured', on, flush=True)\n"
    "if on:\n"
    "    with tracing.publishing('api', 'contact.updated'):\n"
    "        pass\n"
    "tracing.shutdown()\n"
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": " Console , OTLP,console"}, ["console", "otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, []),
        ({"OTEL_TRACES_EXPORTER": "console,none"}, []),
        ({"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "TRUE"}, []),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, ["zipkin"]),
    ],
)
def test_the_exporters_the_environment_names(env: dict[str, str], expected: list[str]) -> None:
    assert tracing.trace_exporters(env) == expected


def test_console_prints_each_span_as_a_json_line() -> None:
    """`OTEL_TRACES_EXPORTER=console`: no collector needed; every span is one line of JSON on
    standard output, named by OTEL_SERVICE_NAME, among the log's lines (each one JSON too)."""
    done = run_python(ONE_SPAN, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="svc-a")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "configured True" in lines, done.stdout
    spans = []
    for line in lines:
        if line == "configured True":
            continue
        record = json.loads(line)  # every other line is one JSON object
        if "context" in record and "name" in record:
            spans.append(record)
    assert [span["name"] for span in spans] == ["dispatcher.publish"], done.stdout
    assert spans[0]["resource"]["attributes"]["service.name"] == "svc-a"


class Collector:
    """An OTLP/HTTP collector on loopback (a thread: the tests wait on a child process),
    keeping the path of every POST."""

    def __init__(self) -> None:
        posts: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # (the stdlib's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                posts.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.posts = posts
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def otlp_collector() -> Iterator[Collector]:
    collector = Collector()
    collector.thread.start()
    yield collector
    collector.server.shutdown()
    collector.server.server_close()


def test_none_exports_nothing_even_with_an_endpoint(otlp_collector: Collector) -> None:
    """`none` wins over an endpoint: no span reaches the collector (which receives them with
    `otlp`, the control), and OpenTelemetry is not even imported."""
    url = otlp_collector.url
    done = run_python(ONE_SPAN, OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=url)
    assert done.returncode == 0, done.stderr
    assert "configured True" in done.stdout
    assert otlp_collector.posts, "the control: with otlp, the collector receives the span"
    otlp_collector.posts.clear()
    done = run_python(
        ONE_SPAN + "import sys\nassert not [m for m in sys.modules if 'opentelemetry' in m]\n",
        OTEL_TRACES_EXPORTER="none",
        OTEL_EXPORTER_OTLP_ENDPOINT=url,
    )
    assert done.returncode == 0, done.stderr
    assert "configured False" in done.stdout
    assert otlp_collector.posts == []
