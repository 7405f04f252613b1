"""6. API: the highest sustained rate of POST /v1/events and POST /v1/messages, and p50/p99.

`dispatcher serve` as shipped (engine on, request logs at info level), on a loopback port, on
a database created for the run, with a workspace, its number and a key made by the product's
own commands (`dispatcher workspaces create`, `numbers add`, `keys create`). One client process
(benchmarks/client.py: aiohttp on uvloop, 100 connections) drives each endpoint twice:

- **paced at 1,000 requests/s** (open loop: a request starts every millisecond whatever the
  answers do; a slow server makes requests wait for one of the 100 connections, and that wait
  counts): p50/p99 latency, target p99 < 50 ms;
- **flat out with 100 concurrent clients** (each sends its next request when the last is
  answered) for a fixed time: the sustained rate of accepted requests (202), target ≥ 2,000/s.

Events are `{"type": "contact.updated", "data": {"id": ...}}` (no subscription: the API alone,
the engine idle beside it); messages go from the workspace's number to 10,000 different
contacts in turn (the sandbox carrier then moves them along, as shipped; no subscription
yet). For information, last, events are also sent flat out after one subscription to the sink
is added, so that the engine in the same process delivers every event while the API takes
them.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import (
    CpuMeter,
    Proc,
    Run,
    Sink,
    create_api_key,
    create_webhooks,
    dispatcher_cli,
    effective_settings,
    fresh_database,
    postmaster_pid,
    run_client,
    start_serve,
    stop_process,
)

NAME = "api"
TITLE = "6. API (POST /v1/events, /v1/messages)"
RATE_TARGET = 2000.0
P99_TARGET_MS = 50.0
PACED_RATE = 1000.0
CLIENTS = 100
NUMBER = "+15555550100"
TARGET_TEXT = "≥ 2,000 req/s sustained (100 clients); p99 < 50 ms at 1,000/s"


async def drive(
    r: Run,
    serve: Proc,
    sink: Sink,
    meter_pg: Any,
    base: str,
    kind: str,
    key: str,
    tag: str,
    paced_s: float,
    flat_s: float,
) -> dict[str, Any]:
    """Paced at 1,000/s, then flat out with 100 clients, against one endpoint."""
    common = ["--url", f"{base}/v1/{kind}", "--kind", kind, "--key", key, "--from", NUMBER]
    common += ["--concurrency", str(CLIENTS)]
    out: dict[str, Any] = {}
    if paced_s > 0:
        out["paced"] = await run_client(
            *common,
            "--rate",
            str(PACED_RATE),
            "--duration",
            str(paced_s),
            "--warm",
            str(CLIENTS),
            "--id-prefix",
            f"{tag}P",
            within=paced_s + 120,
        )
    meter = CpuMeter({"serve": serve.pid, "sink": sink.proc.pid}, meter_pg)
    await sink.reset()
    meter.start()
    flat = await run_client(
        *common, "--duration", str(flat_s), "--id-prefix", f"{tag}F", within=flat_s + 120
    )
    cpu = meter.stop()
    flat["cpu"] = cpu
    flat["client_cpu_us_per_request"] = flat.pop("cpu_us_per_request")
    flat["cpu_us_per_request"] = {
        k: round(v / flat["requests"] * 1e6) if flat["requests"] else None
        for k, v in cpu["cpu_seconds"].items()
    }
    flat["deliveries_received_by_sink"] = (await sink.stats())["count"]
    out["flat_out"] = flat
    paced = out.get("paced")
    r.log(
        f"api: {kind}: {flat['ok_rps']:,.0f} req/s flat out (p50 {flat['p50_ms']:.1f} / p99 "
        f"{flat['p99_ms']:.1f} ms, {flat['errors']} errors)"
        + (
            f"; at {PACED_RATE:g}/s p50 {paced['p50_ms']:.1f} / p99 {paced['p99_ms']:.1f} ms"
            if paced
            else ""
        )
    )
    return out


def row(label: str, m: dict[str, Any], info: bool = False) -> dict[str, Any]:
    flat, paced = m["flat_out"], m.get("paced")
    rate = flat["ok_rps"]
    text = f"{rate:,.0f} req/s flat out (p50 {flat['p50_ms']:.1f} / p99 {flat['p99_ms']:.1f} ms)"
    met: bool | None = rate >= RATE_TARGET and flat["errors"] == 0
    ratio = f"{rate / RATE_TARGET:.2f} of 2,000/s"
    if paced is not None:
        text += (
            f"; at {PACED_RATE:,.0f}/s: p50 {paced['p50_ms']:.1f} / p99 {paced['p99_ms']:.1f} ms"
        )
        errors = flat["errors"] + paced["errors"]
        text += f"; {errors} errors"
        met = bool(met) and paced["p99_ms"] < P99_TARGET_MS and paced["errors"] == 0
        ratio += f"; p99 {paced['p99_ms'] / P99_TARGET_MS:.2f} of 50 ms"
    else:
        text += f"; {flat['deliveries_received_by_sink']:,} delivered meanwhile"
    return {
        "label": label,
        "measured": text,
        "baseline": f"target {RATE_TARGET:,.0f} req/s",
        "ratio": ratio,
        "target": TARGET_TEXT + (" (for information)" if info else ""),
        "met": met,
        **({"info": True} if info else {}),
    }


async def run(r: Run) -> dict[str, Any]:
    sink = await r.shared_sink()
    paced_s = 3.0 if r.quick else 20.0
    flat_s = 3.0 if r.quick else 20.0
    async with fresh_database(r, NAME) as (db, url):
        workspace = (await dispatcher_cli(url, "workspaces", "create", "bench-api"))["id"]
        await dispatcher_cli(url, "numbers", "add", workspace, NUMBER)
        key = await create_api_key(url, workspace, ["events:write", "messages:write"])
        pg = await postmaster_pid(db)
        serve, base = await start_serve(r, url, name="api-serve")
        try:
            events = await drive(r, serve, sink, pg, base, "events", key, "E", paced_s, flat_s)
            messages = await drive(r, serve, sink, pg, base, "messages", key, "M", paced_s, flat_s)
            # For information, last: the engine in the same process delivers every event
            # meanwhile. (Run before the messages, it left them tens of thousands of deliveries
            # to drain beside the API: 6a measured that drain as much as the API.)
            await create_webhooks(db, workspace, [sink.url("/api/0")])
            delivering = await drive(r, serve, sink, pg, base, "events", key, "D", 0, flat_s)
        finally:
            await stop_process(r, serve)
        settings = effective_settings(url, demo="off", log_level="info")
    rows = [
        row("6. API: POST /v1/events, 100 clients", events),
        row("6a. API: POST /v1/messages, 100 clients", messages),
        row(
            "6b. API: POST /v1/events with 1 subscription (engine delivering; for information)",
            delivering,
            info=True,
        ),
    ]
    met = bool(rows[0]["met"]) and bool(rows[1]["met"])
    value = events["flat_out"]["ok_rps"]
    notes = [
        f"{kind}: CPU µs per request (flat out): "
        + ", ".join(f"{k} {v}" for k, v in m["flat_out"]["cpu_us_per_request"].items())
        + f", client {m['flat_out']['client_cpu_us_per_request']}; cores: "
        + ", ".join(f"{k} {v:.2f}" for k, v in m["flat_out"]["cpu"]["cores_used"].items())
        + f"; machine {m['flat_out']['cpu']['machine_busy_fraction']:.0%} busy"
        for kind, m in (
            ("events", events),
            ("messages", messages),
            ("events + delivery", delivering),
        )
    ]
    return {
        "title": TITLE,
        "parameters": {
            "clients": CLIENTS,
            "paced_rate_per_s": PACED_RATE,
            "paced_seconds": paced_s,
            "flat_out_seconds": flat_s,
            "server": "dispatcher serve, engine on, request logs at info (as shipped)",
            "engine_settings": settings,
            "events_body": '{"type": "contact.updated", "data": {"id": ...}}',
            "messages_body": f'{{"from": "{NUMBER}", "to": one of 10,000 numbers, "text"}}',
            "subscriptions": "none (6, 6a); one to the sink (6b)",
        },
        "measured": {
            "value": value,
            "unit": "req/s (POST /v1/events, flat out)",
            "events": events,
            "messages": messages,
            "events_with_delivery": delivering,
        },
        "baseline": {"name": "target", "value": RATE_TARGET, "unit": "req/s"},
        "ratio": value / RATE_TARGET,
        "target": {
            "text": TARGET_TEXT,
            "rate_min": RATE_TARGET,
            "p99_max_ms_at_1000": P99_TARGET_MS,
        },
        "met": met,
        "rows": rows,
        "notes": notes,
        "summary": {
            "measured": rows[0]["measured"],
            "baseline": rows[0]["baseline"],
            "ratio": rows[0]["ratio"],
        },
    }
