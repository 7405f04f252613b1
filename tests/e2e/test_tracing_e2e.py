"""Tracing as an operator turns it on: `dispatcher serve` with OTEL_EXPORTER_OTLP_ENDPOINT
pointing at a real OTLP/HTTP receiver on loopback, which decodes what arrives (protobuf, as a
collector would) and finds the request, its publish, and the attempt linked to it."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.conftest import wait_for
from tests.processes import free_port, read_until, start, stop, until_ready
from tests.receiver import Receiver

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def as_dict(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver: every span posted to /v1/traces, with its resource."""

    port: int = 0
    spans: list[Span] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    content_types: set[str] = field(default_factory=set)

    async def traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.content_types.add(request.content_type)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            self.resources.append(as_dict(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    state = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", state.traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = runner.addresses[0][1]
    yield state
    await runner.cleanup()


async def test_serve_exports_the_request_publish_and_linked_attempt_over_otlp_http(
    database_url: str, receiver: Receiver, collector: Collector
) -> None:
    port = free_port()
    proc = await start(
        database_url,
        "serve",
        "--port",
        str(port),
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.port}",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=e2e",
        OTEL_BSP_SCHEDULE_DELAY="100",  # the SDK's batching, read by the SDK itself
    )
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        async with aiohttp.ClientSession() as http:
            await until_ready(http, base)
            async with http.post(
                f"{base}/v1/webhooks",
                json={"url": receiver.url(), "events": ["contact.updated"]},
                headers=headers,
            ) as resp:
                assert resp.status == 201, await resp.text()
                hook = await resp.json()
            async with http.post(
                f"{base}/v1/events",
                json={"type": "contact.updated", "data": {"id": "CT1"}},
                headers={**headers, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
            ) as resp:
                assert resp.status == 202, await resp.text()
                event = await resp.json()
            await wait_for(lambda: len(receiver.requests) == 1, within=20, message="webhook")

            def exported() -> bool:
                names = {span.name for span in collector.spans}
                return {"dispatcher.attempt", "dispatcher.record"} <= names

            await wait_for(exported, within=20, message="the attempt's spans at the collector")
    finally:
        code, err = await stop(proc)
    assert code == 0, err
    assert "tracing.enabled" in err
    # What receivers get is unchanged: no trace context is sent to them.
    assert "traceparent" not in {name.lower() for name in receiver.requests[0].headers}

    assert collector.content_types == {"application/x-protobuf"}
    assert collector.resources and all(
        r["service.name"] == "dispatcher" and r["deployment.environment.name"] == "e2e"
        for r in collector.resources
    )
    (request,) = collector.named("POST /v1/events")
    assert request.kind == Span.SPAN_KIND_SERVER
    assert request.trace_id.hex() == CALLER_TRACE
    assert request.parent_span_id.hex() == CALLER_SPAN
    assert as_dict(request.attributes)["http.response.status_code"] == 202
    (publish,) = collector.named("dispatcher.publish")
    assert publish.kind == Span.SPAN_KIND_PRODUCER
    assert publish.parent_span_id == request.span_id
    assert as_dict(publish.attributes)["dispatcher.event.id"] == event["id"]
    assert as_dict(publish.attributes)["dispatcher.fanout.count"] == 1
    (attempt,) = collector.named("dispatcher.attempt")
    assert attempt.kind == Span.SPAN_KIND_CLIENT
    attempt_attributes = as_dict(attempt.attributes)
    assert attempt_attributes["dispatcher.event.id"] == event["id"]
    assert attempt_attributes["dispatcher.webhook.id"] == hook["id"]
    assert attempt_attributes["http.response.status_code"] == 200
    assert attempt_attributes["dispatcher.attempt.outcome"] == "success"
    # Across the engine's own trace, the link leads back to the request that published it.
    ((link_trace, link_span),) = [(link.trace_id, link.span_id) for link in attempt.links]
    assert (link_trace.hex(), link_span) == (CALLER_TRACE, publish.span_id)
    claims = {claim.span_id for claim in collector.named("dispatcher.claim")}
    assert attempt.parent_span_id in claims
