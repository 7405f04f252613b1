"""Real Postgres for every test: DATABASE_URL when set, else an embedded server.

The schema is applied once to a template database; each test gets a database of its own that
is as the template made it: cloned from it (`CREATE DATABASE ... TEMPLATE`) once, then reset
between tests, which is much cheaper than a clone (tests/databases.py says how, and when a
used database is dropped rather than reused).
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from dispatcher import log as dispatcher_log
from dispatcher.api.app import create_app
from dispatcher.api.framework.context import SCOPES, Services
from dispatcher.settings import Settings
from dispatcher.store import schema, workspaces
from dispatcher.store.database import Database
from dispatcher.store.embedded import start_embedded, stop_embedded
from tests.clock import FakeClock
from tests.databases import Databases, with_database

pytest_plugins = ["tests.receiver", "tests.browser"]


# Signing secrets, API keys, portal links' secrets and credentials (dpl_, dps_), and a PEM
# private key's body (a webhook's mutual TLS `clientKey`).
SECRET_SHAPES = re.compile(
    r"whsec_[A-Za-z0-9+/]{16,}|(dk|dpl|dps)_[A-Za-z0-9_-]{16,}"
    r"|PRIVATE KEY-----(\\n|\s)*[A-Za-z0-9+/]{16,}"
)
# The admin token of the `settings` fixture's services (the admin API is on in the API tests).
ADMIN_TOKEN = "test-admin-token-" + "0123456789abcdef" * 2
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
LOGGED: list[str] = []


def _tap(_: Any, __: str, event: Any) -> Any:
    LOGGED.append(repr(event))
    return event


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_log() -> Iterator[None]:
    """Every log event of the whole suite is scanned at the end: no signing secret and no API
    key may appear in any of them."""
    dispatcher_log.configure("console", "debug", tap=_tap)
    yield
    leaks = [line for line in LOGGED if SECRET_SHAPES.search(line) or ADMIN_TOKEN in line]
    assert not leaks, f"{len(leaks)} log events carry a secret or key, e.g. {leaks[0][:300]}"


@pytest.fixture(autouse=True)
async def no_process_left_behind() -> AsyncIterator[None]:
    """A test that fails half-way must not leave dispatcher processes running."""
    yield
    await stop_started_processes()


async def stop_started_processes() -> None:
    from tests.processes import STARTED

    while STARTED:
        proc = STARTED.pop()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    url, server = start_embedded(tmp_path_factory.mktemp("pg") / "data")
    # A server of the tests' own, thrown away at the end: nothing it writes must survive a
    # crash, so it need not wait for the disk (each clone and commit would).
    loop = asyncio.new_event_loop()  # not asyncio.run: that would unset the tests' loop
    try:
        loop.run_until_complete(_without_durability(url))
    finally:
        loop.close()
    yield url
    stop_embedded(server)


async def _without_durability(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            await conn.execute(f"ALTER SYSTEM SET {setting} = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def template_db(server_url: str) -> AsyncIterator[str]:
    name = f"dispatcher_tmpl_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    db = await Database.open(with_database(server_url, name), min_size=1, max_size=2)
    await schema.apply_schema(db)
    await db.close()
    yield name
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.close()


@pytest.fixture(scope="session")
async def databases(server_url: str, template_db: str) -> AsyncIterator[Databases]:
    """The session's test databases: cloned from the template, then reused (tests/databases.py)."""
    made = await Databases.open(server_url, template_db)
    yield made
    await made.close()


@pytest.fixture
async def database_url(request: pytest.FixtureRequest, databases: Databases) -> AsyncIterator[str]:
    """A database of its own for this test, as the template made it: a used one reset to the
    template's rows, or a fresh clone (the `fresh_database` mark asks for one always)."""
    fresh = request.node.get_closest_marker("fresh_database") is not None
    name = await databases.take(fresh=fresh)
    yield databases.url(name)
    await stop_started_processes()  # they may still be connected, and would write again
    await databases.give_back(name, reuse=not fresh)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.open(database_url, min_size=1, max_size=10)
    yield database
    await database.close()


@pytest.fixture
def clock() -> FakeClock:
    """Starts at the real time (rows the database stamps with now() stay comparable) and
    ticks a millisecond per read, so rows made one after another are ordered."""
    return FakeClock(tick=0.001)


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        sandbox_delay=0.0,
        allowed_cidrs=Settings.from_env(
            {"DISPATCHER_ALLOWED_CIDRS": "127.0.0.0/8,::1/128"}
        ).allowed_cidrs,
        request_timeout=2.0,
        poll_interval=0.05,
        admin_token=ADMIN_TOKEN,
    )


@pytest.fixture
async def services(db: Database, settings: Settings, clock: FakeClock) -> Services:
    key = await workspaces.instance_secret(db, "cursor")
    return Services(db=db, settings=settings, clock=clock, cursor_key=key)


@pytest.fixture
async def client(services: Services) -> AsyncIterator[TestClient[Any, Any]]:
    """A real HTTP client against the API served on loopback."""
    async with TestClient(TestServer(create_app(services), host="127.0.0.1")) as test_client:
        yield test_client


@dataclass
class Workspace:
    id: str
    number: str
    number_id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


MakeWorkspace = Callable[..., Awaitable[Workspace]]


@pytest.fixture
def make_workspace(db: Database) -> MakeWorkspace:
    counter = iter(range(1, 10_000))

    async def make(scopes: list[str] | None = None, number: str | None = None) -> Workspace:
        n = next(counter)
        workspace_id = await workspaces.create_workspace(db, f"ws{n}")
        number = number or f"+1555{uuid.uuid4().int % 10**7:07d}"
        number_id = await workspaces.add_number(db, workspace_id, number)
        _, key = await workspaces.create_key(db, workspace_id, scopes or sorted(SCOPES))
        return Workspace(workspace_id, number, number_id, key)

    return make


@pytest.fixture
async def ws(make_workspace: MakeWorkspace) -> Workspace:
    return await make_workspace()


async def wait_for(
    predicate: Callable[[], Awaitable[bool]] | Callable[[], bool],
    within: float = 20.0,
    interval: float = 0.01,
    message: str = "condition",
) -> None:
    """Wait for a condition with a deadline (never a bare sleep as synchronisation)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(interval)


# The fast lane (`make test-fast`, i.e. `pytest -m "not slow"`): the unit and API tests, for a
# quick loop while editing. `make test` still runs everything. Marked here rather than in each
# module so that the list of what is slow, and why, is in one place. Measured with
# `pytest --durations` on the project's 2-core machine: what started processes, a browser, a
# real upgrade or a load, or waited out real timeouts (about a second or more each).
# The engine, observability and CLI folders run the delivery engine against real receivers
# and timers, real traffic through metrics and traces, or the CLI: integration tests, not unit
# or API ones, and together half the lane's time (about 50 s of 122 s measured on two workers).
# The conformance folder starts real servers (nginx, Node.js, uvicorn, hypercorn) per test.
SLOW_FOLDERS = frozenset(
    {"e2e", "chaos", "scale", "deploy", "engine", "observability", "cli", "conformance"}
)
SLOW_TESTS = (
    "tests/cli/test_cli.py",  # runs `dispatcher` as a child process for each test
    "tests/cli/test_embedded_missing.py",  # child processes
    "tests/store/test_upgrade_path.py",  # migrates a database from version one, per step
    "tests/store/test_migrations.py",  # whole migration runs, concurrent ones, lock timeouts
    "tests/api/test_slow_clients.py",  # thousands of half-sent requests waiting out timeouts
    "tests/security/test_openapi.py::test_schemathesis_finds_no_server_error",
    "tests/engine/test_rate_limit.py::test_the_limit_holds_across_two_engine_processes",
    "tests/engine/test_rate_limit.py::test_a_grant_sent_late_is_handed_back",
    "tests/engine/test_rate_limit.py::test_waiting_for_the_limit_is_not_an_attempt",
    "tests/engine/test_concurrency.py",  # two engines, slow endpoints, leases running out
    "tests/engine/test_claim_order.py::test_a_fifo_lane_moves_on_while_another",
    "tests/engine/test_claim_order.py::test_a_backlog_in_one_workspace_does_not_delay",
    "tests/engine/test_ordering.py::test_fifo_order_holds_with_two_engines",
    "tests/observability/test_metric_series.py::test_a_rate_limited_backlog_waits",
    "tests/observability/test_metric_series.py::test_series_known_in_advance_exist",
    "tests/observability/test_metric_series.py::test_a_lag_of_minutes_lands",
    "tests/observability/test_metrics.py::test_metrics_move_with_traffic",
    "tests/observability/test_tracing.py::test_without_an_endpoint_opentelemetry_is_not",
    "tests/api/test_page_bounds.py::test_a_recover_past_its_time_limit",
    "tests/api/test_page_bounds.py::test_a_page_past_its_time_limit",
    "tests/api/test_events.py::test_fan_out_to_ten_thousand_subscriptions",
    "tests/api/test_publish_coalescing.py::test_a_database_outage_during_a_shared_commit",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests `slow`: by folder, by the list above, and any that needs a browser."""
    for item in items:
        folder = item.nodeid.split("/")[1] if item.nodeid.startswith("tests/") else ""
        if (
            folder in SLOW_FOLDERS
            or item.nodeid.startswith(SLOW_TESTS)
            or "browser" in getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.slow)
