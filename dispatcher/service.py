"""Process wiring shared by the CLI commands: database (embedded or not), schema, app, loops.

`serve` and `worker` ride out a database that is not there yet exactly as they ride out an
outage once running: they wait with backoff (the API port already answers `/healthz` 200 and
`/readyz` 503) for up to DISPATCHER_STARTUP_TIMEOUT seconds, then exit with one clear line.
The admin commands (`migrate`, `workspaces`, ...) fail at once instead: someone is watching.

Once running, every background loop is supervised (dispatcher/supervision.py): one that ends
makes the process not ready, stop as on SIGTERM, and exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from aiohttp import web

from dispatcher import metrics, monitor, tracing
from dispatcher.api.app import create_app
from dispatcher.api.demo import DemoReceiver, receiver_url
from dispatcher.api.framework.connections import ConnectionLimits
from dispatcher.api.framework.context import SCOPES, Services
from dispatcher.api.health import ReadinessCheck, starting_app
from dispatcher.api.metrics import metrics_only_app
from dispatcher.carrier import SandboxCarrier
from dispatcher.domain.clock import Clock, SystemClock
from dispatcher.domain.events import (
    CALL_STATUS_EVENTS,
    EVENT_TYPES,
    OPERATIONAL_TYPES,
    PUBLISHABLE_TYPES,
    TEST_EVENT,
)
from dispatcher.engine.worker import Engine
from dispatcher.errors import ConfigurationError, DatabaseUnavailable, DispatcherError
from dispatcher.settings import Settings, redact_url
from dispatcher.store import operational, operator_sink, schema, workspaces
from dispatcher.store.database import Database, engine_session
from dispatcher.store.embedded import start_embedded, stop_embedded
from dispatcher.store.key_cache import KeyCache
from dispatcher.supervision import Supervisor

log = structlog.get_logger("dispatcher")

DEMO_NUMBER = "+15555550100"
# The contact the banner's inbound call comes from.
DEMO_CALLER = "+15555550123"
# What the demo webhook hears: every message and call event.
DEMO_EVENTS = sorted(t for t in EVENT_TYPES if t.startswith(("message.", "call.")))
# Start-up retries: the first after 0.1 s, doubling up to this.
STARTUP_MAX_BACKOFF = 5.0
LISTEN_BACKLOG = 128

T = TypeVar("T")


@asynccontextmanager
async def database_for(
    settings: Settings,
    *,
    acquire_timeout: float | None = None,
    session: Mapping[str, str] | None = None,
) -> AsyncIterator[Database]:
    """A pool, not yet connected, for DATABASE_URL or for an embedded server started (and
    stopped) here; closed on the way out. `acquire_timeout` bounds each wait for a connection
    (the API's pool: a request that cannot get one in time is refused, 503 `overloaded`)."""
    server: Any = None
    url = settings.database_url
    if url is None:
        url, server = await asyncio.to_thread(start_embedded, settings.pgdata)
        log.info("database.embedded", pgdata=settings.pgdata)
    assert url is not None
    db = Database(
        url,
        min_size=1,
        max_size=settings.pool_size,
        acquire_timeout=acquire_timeout,
        session=session,
    )
    try:
        yield db
    finally:
        await db.close()
        if server is not None:
            await asyncio.to_thread(stop_embedded, server)


@asynccontextmanager
async def open_database(settings: Settings, *, migrate: bool = True) -> AsyncIterator[Database]:
    """A connected pool, or DatabaseUnavailable at once (the admin commands)."""
    async with database_for(settings) as db:
        await db.connect()
        if migrate:
            await prepare_schema(db)
        yield db


async def wait_for_database(
    db: Database,
    settings: Settings,
    stop: asyncio.Event,
    prepare: Callable[[Database], Awaitable[T]],
) -> T | None:
    """Connect and run `prepare` (schema, ...), retrying with backoff while the database
    cannot be reached, for up to DISPATCHER_STARTUP_TIMEOUT seconds.

    Returns what `prepare` returned, or None when SIGTERM/SIGINT came first. Past the
    deadline, raises DatabaseUnavailable with a one-line message naming the server (password
    masked); a refused statement (bad credentials, no such database) is not retried.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.startup_timeout
    backoff = 0.1
    attempts = 0
    while not stop.is_set():
        attempts += 1
        try:
            async with asyncio.timeout(max(deadline - loop.time(), 0.5)):
                await db.connect()
            result = await prepare(db)
            if attempts > 1:
                log.info("database.connected", attempts=attempts)
            return result
        except DatabaseUnavailable as exc:
            error = str(exc)
        except TimeoutError:
            error = "database unavailable: no answer in time"
        except DispatcherError as exc:  # reached, but refused: waiting will not help
            raise DispatcherError(f"the database at {redact_url(db.url)}: {exc}") from exc
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise DatabaseUnavailable(
                f"could not reach the database at {redact_url(db.url)} within "
                f"{settings.startup_timeout:g}s (DISPATCHER_STARTUP_TIMEOUT): {error}"
            )
        if attempts == 1:
            log.warning("database.waiting", url=redact_url(db.url), error=error,
                        timeout=settings.startup_timeout)  # fmt: skip
        else:
            log.debug("database.still_waiting", attempts=attempts, error=error)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=min(backoff, remaining))
        backoff = min(backoff * 2, STARTUP_MAX_BACKOFF)
    log.info("database.wait_abandoned", reason="stop signal")
    return None


async def prepare_schema(db: Database) -> int:
    """Apply pending migrations (replicas starting together serialise on a lock; the later
    ones find nothing to do). A database at a version this release does not know raises
    SchemaError, which ends the start-up: see docs/operations.md."""
    done = await schema.upgrade(db)
    log.info("database.schema", version=done.after, found=done.before, applied=done.applied)
    return done.after


async def build_services(db: Database, settings: Settings, clock: Clock) -> Services:
    cursor_key = await workspaces.instance_secret(db, "cursor")
    return Services(db=db, settings=settings, clock=clock, cursor_key=cursor_key, keys=KeyCache())


@dataclass(frozen=True)
class Demo:
    """What `serve` found or made of the demo at start-up: the key, printed once when the demo
    was made just now, and the receiver, served while a demo workspace exists."""

    key: str | None
    receiver: DemoReceiver | None


async def prepare_demo(db: Database, settings: Settings, clock: Clock, url: str) -> Demo:
    """On an empty database, make the demo (workspace, number, key, and a webhook to the
    receiver at `url`, this process's); then serve the receiver if there is a demo workspace."""
    if not settings.demo:
        return Demo(None, None)
    webhook = workspaces.DemoWebhook(url=url, events=DEMO_EVENTS)
    key = await workspaces.create_demo_if_empty(
        db, DEMO_NUMBER, sorted(SCOPES), webhook, clock.now()
    )
    workspace_id = await workspaces.demo_workspace_id(db)
    return Demo(key, None if workspace_id is None else DemoReceiver(url, workspace_id))


def print_demo(key: str, host: str, port: int) -> None:
    """The banner: the demo's key, and three things to try with it (send a message; have a
    missed call come in, whose signed delivery the demo receiver shows in the console; and how
    to let the engine reach a receiver of one's own on localhost)."""
    shown_host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "") else host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    base = f"http://{shown_host}:{port}"
    post = f"curl -s {base}/v1/%s -H 'Authorization: Bearer {key}' " + (
        "-H 'Content-Type: application/json' -d '%s'"
    )
    message = f'{{"from": "{DEMO_NUMBER}", "to": "{DEMO_CALLER}", "text": "Hello!"}}'
    call = f'{{"from": "{DEMO_CALLER}", "to": "{DEMO_NUMBER}", "status": "missed"}}'
    print(
        "\nA demo workspace is ready (printed once; create real ones with `dispatcher workspaces`"
        "\nor the admin API)."
        f"\n  number: {DEMO_NUMBER}\n  API key: {key}"
        f"\n\nSend a message:\n  {post % ('messages', message)}"
        f"\n\nHave a missed call come in:\n  {post % ('inbound/calls', call)}"
        "\nIts signed call.missed delivery arrives at the demo receiver of this process; watch it"
        f"\nin the console, {base}/console (sign in with the API key), or read it with"
        f"\n  curl -s {base}/demo/receiver -H 'Authorization: Bearer {key}'"
        "\n\nYour own receiver on localhost? The outbound address guard refuses loopback and"
        "\nprivate addresses (`blocked: loopback address`); allow them for local development with"
        "\n  DISPATCHER_ALLOWED_CIDRS=127.0.0.0/8,::1/128\n",
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


# Open files a `serve` process needs besides its clients' connections: its pools (API and
# engine), its listeners, the engine's outbound connections are counted apart (max_in_flight).
OPEN_FILES_RESERVE = 256


def ensure_open_files(settings: Settings) -> None:
    """Raise the soft open-file limit, up to the hard one, to what the bounds need: every
    client connection (DISPATCHER_MAX_CONNECTIONS) and every delivery in flight is a file
    descriptor. Past the limit, accept() fails for everyone, a slow client's connection and
    a good one's alike; the connection bound is what must refuse first. What cannot be
    raised is logged (`api.open_files_low`), naming the settings to lower."""
    needed = settings.max_connections + settings.max_in_flight + OPEN_FILES_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if raised > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError) as exc:
            log.debug("api.open_files_not_raised", error=str(exc))
    if soft < needed:
        log.warning(
            "api.open_files_low",
            limit=soft,
            needed=needed,
            hint="raise `ulimit -n`, or lower DISPATCHER_MAX_CONNECTIONS / "
            "DISPATCHER_MAX_IN_FLIGHT",
        )


def listen(host: str, port: int) -> list[socket.socket]:
    """Bind the API port first thing, as the event loop would (every address `host` resolves
    to, SO_REUSEADDR, IPv6 sockets v6-only): probes get an answer while the database is being
    waited for, the full API takes over the very same sockets (no moment without a listener),
    and the port logged is the one bound (`--port 0` picks a free one)."""
    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        seen: set[tuple[int, Any]] = set()
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            if sockets and port == 0:  # the others share the port the first one got
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        reason = exc.strerror or str(exc)
        raise ConfigurationError(f"cannot listen on {host}:{port}: {reason}") from exc
    return sockets


async def serve_on(runner: web.AppRunner, sockets: list[socket.socket]) -> None:
    for sock in sockets:
        await web.SockSite(runner, sock).start()


async def serve(settings: Settings, host: str, port: int) -> None:
    stop = stop_signals()
    clock = SystemClock()
    sockets = listen(host, port)
    port = int(sockets[0].getsockname()[1])
    # The values in effect: --host/--port override the settings, and port 0 is resolved.
    settings = settings.with_changes(host=host, port=port)
    demo_url = receiver_url(sockets[0].getsockname())
    log.info("dispatcher.start", settings=settings.redacted(), host=host, port=port)
    ensure_open_files(settings)
    metrics_runner: web.AppRunner | None = None
    starting: web.AppRunner | None = None

    async def hand_over() -> None:
        """The full API listens on the sockets now: the start-up answers stop."""
        nonlocal starting
        if starting is not None:
            runner, starting = starting, None
            await runner.cleanup()

    try:
        tracing.configure()  # from OTEL_*; before the app is made (its request spans)
        declare_metrics()
        metrics_runner = await start_metrics_port(settings, host)
        # Until the database is reached: alive, not ready, API 503 (see api/health.py).
        starting = web.AppRunner(
            starting_app(
                engine=settings.engine,
                serve_metrics=settings.metrics_port is None,
                limits=ConnectionLimits.of(settings),
            ),
            access_log=None,
        )
        await starting.setup()
        await serve_on(starting, [sock.dup() for sock in sockets])
        async with database_for(settings, acquire_timeout=settings.pool_acquire_timeout) as db:

            async def prepare(db: Database) -> tuple[Services, Demo]:
                await prepare_schema(db)
                demo = await prepare_demo(db, settings, clock, demo_url)
                await operator_sink.configure(
                    db,
                    settings.operator_webhook_url,
                    settings.operator_webhook_secret,
                    clock.now(),
                )
                return await build_services(db, settings, clock), demo

            prepared = await wait_for_database(db, settings, stop, prepare)
            if prepared is not None:
                services, demo = prepared
                await run_api(db, services, sockets, hand_over, stop, demo)
    finally:
        await hand_over()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        for sock in sockets:
            sock.close()
        await asyncio.to_thread(tracing.shutdown)  # the spans still buffered leave now
        log.info("dispatcher.stopped")


async def run_api(
    db: Database,
    services: Services,
    sockets: list[socket.socket],
    hand_over: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    demo: Demo,
) -> None:
    """The full API and the loops, from a connected database to the stop signal (or the
    end of a background task: BackgroundTaskFailed, once everything has stopped). The engine
    lets the demo receiver's URL, and no other, through the address guard."""
    settings, clock = services.settings, services.clock
    engine_db = await engine_pool(db, settings) if settings.engine else None
    exempt = [demo.receiver.url] if demo.receiver is not None else []
    engine = (
        Engine(engine_db or db, settings, clock, exempt_urls=exempt) if settings.engine else None
    )
    app = create_app(services, demo.receiver)
    supervisor = Supervisor(stop)
    ready = readiness(app, engine, supervisor)
    carrier = SandboxCarrier(db, clock, settings.sandbox_delay)
    background = [
        asyncio.create_task(carrier.run(), name="carrier"),
        *(
            [asyncio.create_task(services.keys.watch(db.url), name="key cache")]
            if services.keys is not None
            else []
        ),
        *start_housekeeping(db, clock, settings, ready),
    ]
    supervisor.watch(*background)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await serve_on(runner, sockets)
    # Both listen on the same sockets for a moment; then only the full API does.
    await hand_over()
    if demo.key is not None:
        print_demo(demo.key, settings.host, settings.port)
    if engine is not None:
        await engine.start()
        supervisor.watch(*engine.tasks)
    log.info(
        "api.listening", url=f"http://{settings.host}:{settings.port}", engine=engine is not None
    )
    try:
        await stop.wait()
        log.info("dispatcher.stopping")
    finally:
        supervisor.close()
        for site in runner.sites:  # stop accepting; requests in progress finish
            await site.stop()
        if engine is not None:
            await engine.stop()
        if engine_db is not None:
            await engine_db.close()
        await cancel_all(background)
        await runner.cleanup()
    supervisor.raise_failure()


def readiness(
    app: web.Application, engine: Engine | None, supervisor: Supervisor
) -> Callable[[], bool]:
    """Register the checks `/readyz` adds to the database's, and return the process's
    readiness (for the `dispatcher_ready` gauge).

    `engine`, when this process runs one, is true while it runs. A background task that ends
    adds a failed check under its own name (`"carrier": false`), so that the 503 says which;
    while all is well the checks are exactly those of a process without a supervisor.
    """
    checks: list[tuple[str, Callable[[], bool]]] = []
    if engine is not None:
        checks.append(("engine", lambda: engine.running))
    app[ReadinessCheck] = checks
    supervisor.on_failure(lambda name: checks.append((name, lambda: False)))
    return lambda: (engine is None or engine.running) and supervisor.healthy


# Connections of the engine's own pool inside `serve`: claim, recorder, heartbeat and probe.
ENGINE_POOL_SIZE = 4


async def engine_pool(db: Database, settings: Settings) -> Database | None:
    """A small pool of the engine's own inside `serve`, so that its claims and records never
    queue behind API requests for a connection (under API load that wait was most of the
    delivery latency); None, and the engine shares the API's pool, if it cannot open now."""
    engine_db = Database(
        db.url,
        min_size=1,
        max_size=ENGINE_POOL_SIZE,
        session=engine_session(settings.heartbeat_timeout),
    )
    try:
        await engine_db.connect()
    except DispatcherError as exc:
        log.warning("engine.pool_shared", error=str(exc))
        return None
    return engine_db


def start_housekeeping(
    db: Database, clock: Clock, settings: Settings, ready: Callable[[], bool]
) -> list[asyncio.Task[None]]:
    """The loops every process runs beside its real work: gauges and partition maintenance.
    `ready` is the process's own readiness, beyond the database's, for `dispatcher_ready`."""
    return [
        asyncio.create_task(
            monitor.run(db, clock, ready, default_concurrency=settings.max_concurrency_per_webhook),
            name="monitor",
        ),
        asyncio.create_task(
            monitor.maintain(db, clock, settings.retention_days, settings.maintenance_interval),
            name="maintenance",
        ),
    ]


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel and wait for `tasks`. One that had died already was reported by the supervisor
    when it ended: its error must not cut the rest of the shutdown short."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def declare_metrics() -> None:
    """Declare the event-type series each source may count, so that they exist at 0 from the
    first scrape (metrics.py): what the API and the SQL outbox publish, what inbound messages
    and calls and the carrier make, the test event, the operational events."""
    metrics.declare_published(
        {
            "api": PUBLISHABLE_TYPES,
            "inbound": {"message.received", *CALL_STATUS_EVENTS.values()},
            "carrier": {"message.delivered", "message.failed"},
            "test": {TEST_EVENT},
            operational.SOURCE: OPERATIONAL_TYPES,
        }
    )


async def start_metrics_port(settings: Settings, host: str) -> web.AppRunner | None:
    """Serve /metrics on DISPATCHER_METRICS_PORT, when set (and then only there: the API
    port answers 404). Started before the database is reached: a scrape during start-up
    shows `dispatcher_ready 0`."""
    if settings.metrics_port is None:
        return None
    runner = web.AppRunner(metrics_only_app(), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, settings.metrics_port).start()
    except OSError as exc:
        await runner.cleanup()
        reason = exc.strerror or str(exc)
        raise ConfigurationError(
            f"cannot listen on {host}:{settings.metrics_port} (DISPATCHER_METRICS_PORT): {reason}"
        ) from exc
    bound = runner.addresses[0][1] if runner.addresses else settings.metrics_port
    log.info("metrics.listening", url=f"http://{host}:{bound}/metrics")
    return runner


async def work(settings: Settings) -> None:
    """The delivery engine alone (`dispatcher worker`), to scale it apart from the API."""
    stop = stop_signals()
    log.info("dispatcher.worker.start", settings=settings.redacted())
    tracing.configure()
    declare_metrics()
    metrics_runner = await start_metrics_port(settings, settings.host)
    try:
        # The worker's pool is the engine's: its sessions end when stalled in a transaction.
        session = engine_session(settings.heartbeat_timeout)
        async with database_for(settings, session=session) as db:
            if await wait_for_database(db, settings, stop, prepare_schema) is None:
                return
            clock = SystemClock()
            engine = Engine(db, settings, clock)
            supervisor = Supervisor(stop)
            await engine.start()
            supervisor.watch(*engine.tasks)
            watchers = start_housekeeping(
                db, clock, settings, lambda: engine.running and supervisor.healthy
            )
            supervisor.watch(*watchers)
            try:
                await stop.wait()
                log.info("dispatcher.stopping")
            finally:
                supervisor.close()
                await engine.stop()
                await cancel_all(watchers)
            supervisor.raise_failure()
    finally:
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        await asyncio.to_thread(tracing.shutdown)
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
