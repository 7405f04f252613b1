"""What every scenario shares: the run's context, databases, processes, timing and results.

Rules the helpers enforce: all traffic goes to 127.0.0.1 (or Postgres' own socket), every
wait is bounded by a deadline, every process started here is stopped (SIGTERM, then SIGKILL)
by the run's `finally`, and every figure is written next to the baseline it is divided by.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import orjson
from tqdm import tqdm

from dispatcher.domain.signing import new_secret
from dispatcher.store.database import Database

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
RESULTS = ROOT / "results"
WORK = ROOT / ".work"
LOGS = WORK / "logs"
EVENT_TYPE = "contact.updated"
# Server settings written into every result (read once per run by __main__).
SERVER_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "shared_buffers",
    "autovacuum",
    "autovacuum_naptime",
)


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    """One invocation of the suite: where the database is, how big to go, what was measured."""

    server_url: str
    database_source: str  # "DATABASE_URL" | "embedded"
    quick: bool = False
    scale: float = 1.0
    results_dir: Path = RESULTS
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    options: dict[str, Any] = field(default_factory=dict)
    sink: Sink | None = None

    def size(self, full: int, quick: int) -> int:
        """A scenario's N: `quick` in --quick runs, else `full` times --scale."""
        return quick if self.quick else max(1, int(full * self.scale))

    def db_name(self, scenario: str) -> str:
        return f"bench_{scenario}_{self.run_id}".replace("-", "_")

    def log(self, message: str) -> None:
        tqdm.write(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr)

    @property
    def venv_bin(self) -> Path:
        return Path(sys.executable).parent

    async def require(self, name: str) -> dict[str, Any]:
        """The result of scenario `name` in this run, running it first if need be."""
        if name not in self.results:
            from benchmarks.scenarios import run_scenario

            await run_scenario(self, name)
        return self.results[name]

    async def shared_sink(self) -> Sink:
        """The fast sink every throughput scenario and the ceiling send to (one per run)."""
        if self.sink is None or not self.sink.proc.alive():
            self.sink = await start_sink(self, "fast", name="sink-shared")
        return self.sink

    async def stop_all(self) -> None:
        for proc in reversed(self.procs):
            await proc.stop()
        self.procs.clear()


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


# -- databases -------------------------------------------------------------------------------


async def create_database(run: Run, name: str) -> str:
    admin = await asyncpg.connect(run.server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return with_database(run.server_url, name)


async def drop_database(run: Run, name: str) -> None:
    admin = await asyncpg.connect(run.server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def fresh_database(
    run: Run, scenario: str, *, schema_applied: bool = True, pool_size: int = 10
) -> AsyncIterator[tuple[Database, str]]:
    """A new database for one scenario, with dispatcher's schema (applied by `dispatcher
    migrate`, the product's own command); dropped afterwards."""
    name = run.db_name(scenario)
    url = await create_database(run, name)
    if schema_applied:
        await migrate(url)
    db = await Database.open(url, min_size=1, max_size=pool_size)
    try:
        yield db, url
    finally:
        await db.close()
        if not run.options.get("keep_databases"):
            await drop_database(run, name)


async def migrate(url: str) -> None:
    """`python -m dispatcher migrate` against `url` (bounded)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dispatcher",
        "migrate",
        cwd=REPO,
        env={**os.environ, **engine_env(url)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=300)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"dispatcher migrate failed: {out.decode(errors='replace')[-3000:]}")


async def create_workspace(db: Database, name: str = "bench") -> str:
    workspace_id = "WS" + uuid.uuid4().hex
    async with db.acquire() as conn:
        await conn.execute("INSERT INTO workspaces (id, name) VALUES ($1, $2)", workspace_id, name)
    return workspace_id


async def create_webhooks(
    db: Database,
    workspace_id: str,
    urls: Sequence[str],
    *,
    events: Sequence[str] = (EVENT_TYPE,),
    secret: str | None = None,
    max_concurrency: int | None = None,
) -> list[tuple[str, str]]:
    """One webhook per URL; returns [(webhook_id, secret)] in the order of `urls`."""
    secrets = [secret or new_secret() for _ in urls]
    async with db.acquire() as conn:
        rows = await conn.fetch(
            "INSERT INTO webhooks (id, workspace_id, url, events, secret, max_concurrency) "
            "SELECT dispatcher_new_id('WH'), $1, u.url, $2::text[], u.secret, $4 "
            "FROM unnest($3::text[], $5::text[]) WITH ORDINALITY AS u(url, secret, n) "
            "ORDER BY u.n RETURNING id, secret",
            workspace_id,
            list(events),
            list(urls),
            max_concurrency,
            secrets,
        )
    return [(row["id"], row["secret"]) for row in rows]


async def publish_events(
    run: Run,
    db: Database,
    workspace_id: str,
    events: int,
    *,
    chunk: int = 2000,
    desc: str = "publish",
    first: int = 1,
    fanout: int = 1,
) -> float:
    """Publish `events` events through dispatcher_publish_event (each fans out to every
    subscribed webhook), `chunk` per statement, with a progress bar; returns seconds."""
    started = time.perf_counter()
    with tqdm(
        total=events * fanout, desc=desc, unit="dlv", leave=False, unit_scale=True, position=1
    ) as bar:
        for low in range(first, first + events, chunk):
            high = min(low + chunk, first + events) - 1
            async with db.acquire() as conn:
                await conn.execute(
                    "SELECT count(dispatcher_publish_event($1, $2, "
                    "jsonb_build_object('id', 'CT' || g))) FROM generate_series($3::int, $4) g",
                    workspace_id,
                    EVENT_TYPE,
                    low,
                    high,
                    timeout=600,
                )
            bar.update((high - low + 1) * fanout)
    return time.perf_counter() - started


async def count_status(
    db: Database, status: str = "delivered", *, excluding: Sequence[str] = ()
) -> int:
    """Deliveries in `status`, those of the webhooks `excluding` left out."""
    async with db.acquire() as conn:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM deliveries WHERE status = $1 AND webhook_id <> ALL($2::text[])",
            status,
            list(excluding),
        )
    return n


async def limit_rate(db: Database, webhook_ids: Sequence[str], rate_limit: int) -> None:
    """Give webhooks a rate limit (requests per second), with their token buckets, as the
    API does."""
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE webhooks SET rate_limit = $2 WHERE id = ANY($1::text[])",
            list(webhook_ids),
            rate_limit,
        )
        await conn.execute(
            "INSERT INTO webhook_rates (webhook_id) SELECT unnest($1::text[])", list(webhook_ids)
        )


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    """A child process with its output in .work/logs; stopped by SIGTERM, then SIGKILL."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_mb(self) -> float:
        """VmRSS of the process from /proc (0 when it is gone)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    async def stop(self, grace: float = 15.0, sig: int = signal.SIGTERM) -> int | None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)
            deadline = time.monotonic() + grace
            while self.popen.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            if self.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(self.popen.wait, 5)
        return self.popen.returncode

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _die_with_parent() -> None:
    """In the child, before exec (Linux): get SIGTERM when the harness dies, even by SIGKILL."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_process(
    run: Run,
    name: str,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    *,
    executable: Sequence[str] | None = None,
) -> Proc:
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{run.run_id}-{name}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log_file:
        popen = subprocess.Popen(
            [*(executable or [sys.executable]), *args],
            cwd=REPO,
            env=full_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    proc = Proc(name, popen, log_path)
    run.procs.append(proc)
    return proc


async def stop_process(run: Run, proc: Proc, *, sig_int: bool = False) -> None:
    await proc.stop(sig=signal.SIGINT if sig_int else signal.SIGTERM)
    if proc in run.procs:
        run.procs.remove(proc)


@dataclass
class Sink:
    proc: Proc
    port: int
    mode: str

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _call(self, method: str, path: str) -> Any:
        timeout = aiohttp.ClientTimeout(total=30)
        async with (
            aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
            session.request(method, self.url(path)) as response,
        ):
            return orjson.loads(await response.read())

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", "/stats")
        return result

    async def reset(self) -> None:
        await self._call("POST", "/reset")

    async def records(self) -> list[tuple[str, float]]:
        """(data.id, receive time) of every request (a sink started with record=True)."""
        return [(r[0], r[1]) for r in await self._call("GET", "/records")]

    async def all_records(self) -> list[list[Any]]:
        """[data.id, receive time, path, client port] of every request (record=True)."""
        result: list[list[Any]] = await self._call("GET", "/records")
        return result

    async def flow(self, since: float, exclude: Sequence[int] = ()) -> dict[str, float]:
        """{path: first receive time >= since}, not counting requests from `exclude` ports."""
        query = f"/flow?since={since!r}&exclude={','.join(str(p) for p in exclude)}"
        result: dict[str, float] = await self._call("GET", query)
        return result


async def start_sink(
    run: Run,
    mode: str = "fast",
    *,
    secret: str | None = None,
    record: bool = False,
    hang_max: float = 60.0,
    name: str | None = None,
) -> Sink:
    port = free_port()
    args = ["-m", "benchmarks.sink", "--port", str(port), "--mode", mode]
    args += ["--hang-max", str(hang_max), "--max-lifetime", "7200"]
    if secret:
        args += ["--secret", secret]
    if record:
        args.append("--record")
    proc = start_process(run, name or f"sink-{mode}-{port}", args)
    sink = Sink(proc, port, mode)

    async def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"sink exited:\n{proc.tail()}")
        try:
            await sink.stats()
            return True
        except (aiohttp.ClientError, OSError):
            return False

    await wait_until(ready, within=20, interval=0.1, what="sink to listen")
    return sink


def engine_env(url: str, **settings: Any) -> dict[str, str]:
    """Environment for `python -m dispatcher worker`: DISPATCHER_<NAME> for each setting."""
    env = {
        "DATABASE_URL": url,
        "DISPATCHER_ALLOWED_CIDRS": "127.0.0.0/8",
        "DISPATCHER_LOG_LEVEL": "warning",
        "DISPATCHER_LOG_FORMAT": "json",
    }
    for key, value in settings.items():
        env["DISPATCHER_" + key.upper()] = str(value)
    return env


def effective_settings(url: str, **settings: Any) -> dict[str, Any]:
    """The settings a `dispatcher` process started with engine_env(url, **settings) runs with
    (the product's defaults plus what the scenario set), for the result's JSON."""
    env = engine_env(url, **settings)
    try:
        from dispatcher.settings import Settings

        values = Settings.from_env(env).redacted()
    except Exception as exc:  # the settings module is not the harness's to depend on
        return {"error": repr(exc), "env": {k: v for k, v in env.items() if k != "DATABASE_URL"}}
    for key in ("database_url", "pgdata", "host", "port", "log_format"):
        values.pop(key, None)
    return {key: list(v) if isinstance(v, tuple) else v for key, v in values.items()}


def start_worker(run: Run, url: str, name: str = "worker", **settings: Any) -> Proc:
    return start_process(run, name, ["-m", "dispatcher", "worker"], engine_env(url, **settings))


async def start_serve(run: Run, url: str, name: str = "serve", **settings: Any) -> tuple[Proc, str]:
    """`python -m dispatcher serve` on a free loopback port, engine on unless `engine="off"`,
    no demo workspace, the shipped log level (info: one JSON line per API request) unless
    given; returns the process and its base URL once `GET /readyz` answers 200."""
    port = free_port()
    env = engine_env(url, **{"demo": "off", "log_level": "info", **settings})
    args = ["-m", "dispatcher", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = start_process(run, name, args, env)
    base = f"http://127.0.0.1:{port}"

    async def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"{name} exited:\n{proc.tail()}")
        timeout = aiohttp.ClientTimeout(total=5)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
                session.get(f"{base}/readyz") as response,
            ):
                return response.status == 200
        except (aiohttp.ClientError, OSError):
            return False

    await wait_until(ready, within=90, interval=0.1, what=f"{name} to be ready")
    return proc, base


async def run_json(
    args: Sequence[str],
    *,
    within: float,
    env: dict[str, str] | None = None,
    what: str = "",
    executable: Sequence[str] | None = None,
) -> Any:
    """Run `python <args>` (or `<executable> <args>`) to its end (killed after `within` s, or
    if we are cancelled) and return the last line of its stdout as JSON."""
    proc = await asyncio.create_subprocess_exec(
        *(executable or [sys.executable]),
        *args,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=within)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 10)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what or args[1]} failed ({proc.returncode}): {err.decode(errors='replace')[-3000:]}"
        )
    return orjson.loads(out.splitlines()[-1])


async def run_client(*args: str, within: float) -> dict[str, Any]:
    """benchmarks/client.py in its own process; its JSON result."""
    result: dict[str, Any] = await run_json(
        ["-m", "benchmarks.client", *args], within=within, what="benchmarks.client"
    )
    return result


async def dispatcher_cli(url: str, *args: str) -> dict[str, Any]:
    """`python -m dispatcher <args> --json` against `url` (the product's admin commands)."""
    result: dict[str, Any] = await run_json(
        ["-m", "dispatcher", *args, "--json"],
        within=120,
        env=engine_env(url),
        what=f"dispatcher {' '.join(args[:2])}",
    )
    return result


async def create_api_key(url: str, workspace_id: str, scopes: Sequence[str]) -> str:
    """A key made by `dispatcher keys create` (the only way a key is meant to be made)."""
    args = ["keys", "create", workspace_id]
    for scope in scopes:
        args += ["--scope", scope]
    key: str = (await dispatcher_cli(url, *args))["key"]
    return key


def local_tcp_ports(pid: int) -> set[int]:
    """The local ports of a process's TCP sockets (its client connections), from /proc."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


async def scrape_engine_metrics(port: int) -> dict[str, float]:
    """The engine's claim and record histograms (sum, count) from its /metrics port."""
    out: dict[str, float] = {}
    timeout = aiohttp.ClientTimeout(total=10)
    text = ""
    for attempt in range(50):  # the port opens just after the engine starts
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
                session.get(f"http://127.0.0.1:{port}/metrics") as response,
            ):
                text = await response.text()
            break
        except (aiohttp.ClientConnectionError, OSError):
            if attempt == 49:
                raise
            await asyncio.sleep(0.1)
    for line in text.splitlines():
        if line.startswith(("dispatcher_claim_", "dispatcher_record_")) and "{" not in line:
            name, value = line.split()
            if name.endswith(("_sum", "_count")):
                out[name.removeprefix("dispatcher_")] = float(value)
    return out


def engine_statements(
    before: dict[str, float], after: dict[str, float], seconds: float
) -> dict[str, Any]:
    """Claims and record flushes between two scrapes: per second, mean batch, mean ms."""

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    out: dict[str, Any] = {}
    for kind in ("claim", "record"):
        n = delta(f"{kind}_duration_seconds_count")
        out[kind] = {
            "per_second": round(n / seconds, 1) if seconds else None,
            "mean_batch": round(delta(f"{kind}_batch_size_sum") / n, 1) if n else None,
            "mean_ms": round(delta(f"{kind}_duration_seconds_sum") / n * 1000, 2) if n else None,
        }
    return out


# -- waiting and timing ----------------------------------------------------------------------


async def wait_until(
    predicate: Callable[[], Awaitable[bool]],
    *,
    within: float,
    interval: float = 0.2,
    what: str = "condition",
) -> float:
    """Poll until `predicate()`; returns the wall time (time.time()) it first held."""
    deadline = time.monotonic() + within
    while True:
        if await predicate():
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(interval)


async def wait_for_count(
    run: Run,
    db: Database,
    target: int,
    *,
    within: float,
    desc: str,
    procs: Sequence[Proc] = (),
    interval: float = 0.2,
    status: str = "delivered",
    excluding: Sequence[str] = (),
) -> float:
    """Poll the count of deliveries in `status` (those of the webhooks `excluding` left out)
    until it reaches `target`, with a bar; returns the wall time it was first seen complete.
    Fails fast if a process died."""
    with tqdm(total=target, desc=desc, unit="dlv", leave=False, unit_scale=True, position=1) as bar:

        async def done() -> bool:
            for proc in procs:
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited early:\n{proc.tail()}")
            n = await count_status(db, status, excluding=excluding)
            bar.update(n - bar.n)
            return n >= target

        return await wait_until(done, within=within, interval=interval, what=desc)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return float(ordered[index])


def ratio(value: float, baseline: float) -> float | None:
    return value / baseline if baseline else None


# -- results ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    with contextlib.suppress(OSError):
        info["loadavg_at_write"] = [round(x, 2) for x in os.getloadavg()]
    return info


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
        commit = out.stdout.strip() or None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "dispatcher", "schema.sql"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return f"{commit}+dirty" if commit and dirty else commit
    except (OSError, subprocess.SubprocessError):
        return None


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_result(
    run: Run, name: str, result: dict[str, Any], commit: str | None = None
) -> dict[str, Any]:
    """benchmarks/results/<name>.json: the scenario's figures plus where and when."""
    document = {
        "scenario": name,
        **result,
        "quick": run.quick,
        "scale": run.scale,
        "database": run.database_source,
        "server": {key: run.options.get(key) for key in SERVER_SETTINGS},
        "machine": machine(),
        "date": utc_now(),
        "git_commit": commit or git_commit(),
    }
    run.results_dir.mkdir(parents=True, exist_ok=True)
    path = run.results_dir / f"{name}.json"
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    run.results[name] = document
    return document


# -- where the CPU went ----------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, cpu seconds) of a process from /proc/<pid>/stat, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK


def _serves_other_database(pid: int, database: str) -> bool:
    """True for a Postgres backend (or autovacuum worker) of another database than ours, from
    its process title: `postgres: [cluster: ]user db host(port) state` or `postgres:
    [cluster: ]autovacuum worker db`. Shared processes (checkpointer, WAL writer, ...) serve
    every database and count as ours."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return False
    words = title.split()
    if not words or words[0] != "postgres:":
        return False
    words = words[1:]
    if words and words[0].endswith(":"):  # cluster_name
        words = words[1:]
    if words[:2] == ["autovacuum", "worker"]:
        return len(words) > 2 and words[2] != database
    # A client backend: user, database, then its client ("[local]" or "host(port)").
    for i, word in enumerate(words):
        if i >= 2 and (word == "[local]" or (word.endswith(")") and "(" in word)):
            return words[i - 1] != database
    return False


def process_tree_cpu(root: int, database: str | None = None) -> dict[int, float]:
    """CPU seconds per process of `root` and its direct children (postmaster and backends);
    with `database`, leaving out the backends of other databases (other users of a shared
    server)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is not None and (pid == root or stat[0] == root):
            if pid != root and database and _serves_other_database(pid, database):
                continue
            out[pid] = stat[1]
    return out


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return (sum(parts) - idle) / CLK_TCK, sum(parts) / CLK_TCK


@dataclass(frozen=True)
class Postgres:
    """The server's postmaster on this machine and the database whose backends we count."""

    pid: int
    database: str


async def postmaster_pid(db: Database) -> Postgres | None:
    """The server's postmaster, when it runs on this machine (the parent of our backend)."""
    async with db.acquire() as conn:
        backend: int = await conn.fetchval("SELECT pg_backend_pid()")
        database: str = await conn.fetchval("SELECT current_database()")
    stat = _stat(backend)
    return Postgres(stat[0], database) if stat is not None else None


class CpuMeter:
    """CPU seconds used by named processes, Postgres (postmaster, its shared processes and
    every backend of our database, also those that exit meanwhile: sampled every 0.5 s) and
    the machine, between start() and stop()."""

    def __init__(self, pids: dict[str, int], postmaster: Postgres | None) -> None:
        self.pids = pids
        self.postmaster = postmaster
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.pg_first: dict[int, float] = {}
        self.pg_last: dict[int, float] = {}
        self.machine_first = (0.0, 0.0)
        self.wall = 0.0
        self.task: asyncio.Task[None] | None = None

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            stat = _stat(pid)
            if stat is not None:
                self.last[name] = stat[1]
        if self.postmaster is not None:
            self.pg_last.update(process_tree_cpu(self.postmaster.pid, self.postmaster.database))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self._sample()

    def start(self) -> None:
        self._sample()
        self.first = dict(self.last)
        self.pg_first = dict(self.pg_last)
        self.machine_first = machine_busy()
        self.wall = time.monotonic()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> dict[str, Any]:
        if self.task is not None:
            self.task.cancel()
        self._sample()
        wall = time.monotonic() - self.wall
        used = {name: self.last.get(name, 0.0) - self.first.get(name, 0.0) for name in self.pids}
        if self.postmaster is not None:
            used["postgres"] = sum(
                value - self.pg_first.get(pid, 0.0) for pid, value in self.pg_last.items()
            )
        busy, total = machine_busy()
        busy -= self.machine_first[0]
        total -= self.machine_first[1]
        return {
            "wall_seconds": round(wall, 3),
            "cpu_seconds": {k: round(v, 2) for k, v in used.items()},
            "cores_used": {k: round(v / wall, 2) for k, v in used.items()} if wall else {},
            "machine_busy_fraction": round(busy / total, 3) if total else None,
            "machine_cores": os.cpu_count() or 1,
        }
