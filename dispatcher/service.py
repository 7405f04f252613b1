"""Process wiring shared by the CLI commands: database (embedded or not), schema, app, loops."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import structlog
from aiohttp import web

from dispatcher import monitor
from dispatcher.api.app import create_app
from dispatcher.api.context import SCOPES, Services
from dispatcher.api.health import ReadinessCheck
from dispatcher.api.metrics import metrics_only_app
from dispatcher.carrier import SandboxCarrier
from dispatcher.domain.clock import Clock, SystemClock
from dispatcher.engine.worker import Engine
from dispatcher.settings import Settings
from dispatcher.store import schema, workspaces
from dispatcher.store.database import Database
from dispatcher.store.embedded import start_embedded, stop_embedded

log = structlog.get_logger("dispatcher")

DEMO_NUMBER = "+15555550100"


@asynccontextmanager
async def open_database(settings: Settings, *, migrate: bool = True) -> AsyncIterator[Database]:
    """The pool for DATABASE_URL, or for an embedded server started (and stopped) here."""
    server: Any = None
    url = settings.database_url
    if url is None:
        url, server = await asyncio.to_thread(start_embedded, settings.pgdata)
        log.info("database.embedded", pgdata=settings.pgdata)
    assert url is not None
    try:
        db = await Database.open(url, min_size=1, max_size=settings.pool_size)
        try:
            if migrate:
                version = await schema.apply_schema(db)
                log.info("database.schema", version=version)
            yield db
        finally:
            await db.close()
    finally:
        if server is not None:
            await asyncio.to_thread(stop_embedded, server)


async def build_services(db: Database, settings: Settings, clock: Clock) -> Services:
    cursor_key = await workspaces.instance_secret(db, "cursor")
    return Services(db=db, settings=settings, clock=clock, cursor_key=cursor_key)


def print_demo(key: str, host: str, port: int) -> None:
    shown_host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
    print(
        "\nA demo workspace is ready (printed once; create real ones with `dispatcher workspaces`)."
        f"\n  number: {DEMO_NUMBER}\n  API key: {key}\n\nSend a message:\n"
        f"  curl -s http://{shown_host}:{port}/v1/messages -H 'Authorization: Bearer {key}' "
        "-H 'Content-Type: application/json' "
        f'-d \'{{"from": "{DEMO_NUMBER}", "to": "+15555550123", "text": "Hello!"}}\'\n',
        flush=True,
    )


def stop_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT; installed first thing, so that a signal arriving
    during start-up still means a clean stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve(settings: Settings, host: str, port: int) -> None:
    stop = stop_signals()
    clock = SystemClock()
    log.info("dispatcher.start", settings=settings.redacted(), host=host, port=port)
    async with open_database(settings) as db:
        if settings.demo:
            key = await workspaces.create_demo_if_empty(db, DEMO_NUMBER, sorted(SCOPES))
            if key is not None:
                print_demo(key, host, port)
        services = await build_services(db, settings, clock)
        engine = Engine(db, settings, clock) if settings.engine else None
        app = create_app(services)
        engine_ok = (lambda: engine.running) if engine is not None else (lambda: True)
        if engine is not None:
            app[ReadinessCheck] = [("engine", engine_ok)]
        carrier = SandboxCarrier(db, clock, settings.sandbox_delay)
        background = [
            asyncio.create_task(carrier.run(), name="carrier"),
            *start_housekeeping(db, clock, settings, engine_ok),
        ]
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        metrics_runner = await start_metrics_port(settings, host)
        if engine is not None:
            await engine.start()
        log.info("api.listening", url=f"http://{host}:{port}", engine=engine is not None)
        try:
            await stop.wait()
            log.info("dispatcher.stopping")
        finally:
            await site.stop()
            if engine is not None:
                await engine.stop()
            await cancel_all(background)
            await runner.cleanup()
            if metrics_runner is not None:
                await metrics_runner.cleanup()
    log.info("dispatcher.stopped")


def start_housekeeping(
    db: Database, clock: Clock, settings: Settings, engine_ok: Callable[[], bool]
) -> list[asyncio.Task[None]]:
    """The loops every process runs beside its real work: gauges and partition maintenance."""
    return [
        asyncio.create_task(monitor.run(db, clock, engine_ok), name="monitor"),
        asyncio.create_task(
            monitor.maintain(db, clock, settings.retention_days, settings.maintenance_interval),
            name="maintenance",
        ),
    ]


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def start_metrics_port(settings: Settings, host: str) -> web.AppRunner | None:
    """Serve /metrics on DISPATCHER_METRICS_PORT too, when set."""
    if settings.metrics_port is None:
        return None
    runner = web.AppRunner(metrics_only_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, settings.metrics_port).start()
    log.info("metrics.listening", url=f"http://{host}:{settings.metrics_port}/metrics")
    return runner


async def work(settings: Settings) -> None:
    """The delivery engine alone (`dispatcher worker`), to scale it apart from the API."""
    stop = stop_signals()
    log.info("dispatcher.worker.start", settings=settings.redacted())
    async with open_database(settings) as db:
        clock = SystemClock()
        engine = Engine(db, settings, clock)
        await engine.start()
        watchers = start_housekeeping(db, clock, settings, lambda: engine.running)
        metrics_runner = await start_metrics_port(settings, settings.host)
        try:
            await stop.wait()
            log.info("dispatcher.stopping")
        finally:
            await engine.stop()
            await cancel_all(watchers)
            if metrics_runner is not None:
                await metrics_runner.cleanup()
    log.info("dispatcher.stopped")


def run(coro: Any) -> Any:
    """Run on uvloop where available."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency; this is for odd platforms
        return asyncio.run(coro)


def fail(message: str, code: int = 1) -> None:
    print(f"dispatcher: error: {message}", file=sys.stderr)
    raise SystemExit(code)
