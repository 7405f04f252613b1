"""One frozen Settings, read from the environment and validated once at start-up.

Every setting is documented in docs/configuration.md; names are a contract with operators.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

from dispatcher.domain.proxy import PROXY_SETTING, EgressProxy, parse_egress_proxy
from dispatcher.domain.signing import check_secret
from dispatcher.domain.urls import check_webhook_url
from dispatcher.errors import ConfigurationError

DEFAULT_RETRY_SCHEDULE = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The admin token guards every tenant (docs/admin.md): a short one is refused at start-up.
ADMIN_TOKEN_MIN_LENGTH = 32
ADMIN_TOKEN_VARIABLE = "DISPATCHER_ADMIN_TOKEN"

T = TypeVar("T")

# The default bound on API requests in progress, per connection of the pool (docs/configuration.md,
# "Sizing the bound"): with the default pool of 10, 100 requests.
REQUESTS_PER_CONNECTION = 10


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    pgdata: str = ".dispatcher/pgdata"
    host: str = "127.0.0.1"
    port: int = 8080
    engine: bool = True
    log_format: str = "auto"
    log_level: str = "info"
    # The demo workspace (and its key, printed once): by default only with the embedded
    # Postgres, a developer's machine; against a DATABASE_URL only when asked for
    # (DISPATCHER_DEMO=on), so that a deployment never mints a credential into its logs.
    demo: bool = False
    pool_size: int = 10
    startup_timeout: float = 60.0
    # Backpressure (docs/configuration.md, "Overload"): API requests in progress at most (by
    # default REQUESTS_PER_CONNECTION per pool connection), how long one past the bound may
    # wait for a slot, and how long a request may wait for a pool connection, before 503.
    max_requests_in_progress: int = REQUESTS_PER_CONNECTION * 10
    admission_timeout: float = 0.05
    pool_acquire_timeout: float = 0.5
    # Slow clients (docs/configuration.md, "Slow clients"): how long a connection may take to
    # send a request's head, then its body, how long it may sit idle between requests, and
    # how many connections a `serve` process keeps open at once.
    head_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 75.0
    max_connections: int = 1000
    # Delivery engine
    retry_schedule: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE
    request_timeout: float = 15.0
    disable_after: float = 432000.0
    allowed_cidrs: tuple[Network, ...] = ()
    max_concurrency_per_webhook: int = 10
    max_in_flight: int = 1000
    claim_batch_size: int = 500
    poll_interval: float = 1.0
    shutdown_timeout: float = 10.0
    lease_margin: float = 30.0  # accepted for compatibility; leases follow heartbeats now
    heartbeat_timeout: float = 3.0
    secret_rotation_grace: float = 86400.0
    # How much of each answer's body the attempt log keeps (0: none).
    response_excerpt_bytes: int = 1024
    # History
    retention_days: int = 30
    maintenance_interval: float = 3600.0
    # Messaging (the sandbox carrier is the only one)
    sandbox_delay: float = 1.0
    # Observability
    metrics_port: int | None = None
    metrics_per_webhook: bool = False
    # How many webhooks get a series of their own when it is on (the rest: webhook="_other").
    metrics_per_webhook_limit: int = 1000
    # The operator sink: every workspace's operational events, also delivered here.
    operator_webhook_url: str | None = None
    operator_webhook_secret: str | None = None
    # Admin API (docs/admin.md): None turns it off (its routes answer 404). Never in a repr.
    admin_token: str | None = field(default=None, repr=False)
    # Every attempt through this HTTP proxy (docs/configuration.md, "The egress proxy").
    egress_proxy: EgressProxy | None = None
    # The service's address as its users reach it (docs/console.md, "Portal sessions"): the base
    # of portal links. None: the origin each request came to.
    public_url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}

        def read(name: str, attr: str, parse: Callable[[str], Any]) -> None:
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return
            try:
                values[attr] = parse(raw.strip())
            except (ValueError, TypeError) as exc:
                raise ConfigurationError(f"{name}={raw!r} is not valid: {exc}") from exc

        read("DATABASE_URL", "database_url", str)
        read("DISPATCHER_PGDATA", "pgdata", str)
        read("DISPATCHER_HOST", "host", str)
        read("DISPATCHER_PORT", "port", _port)
        read("DISPATCHER_ENGINE", "engine", _on_off)
        read("DISPATCHER_LOG_FORMAT", "log_format", _choice("auto", "json", "console"))
        read("DISPATCHER_LOG_LEVEL", "log_level", _choice("debug", "info", "warning", "error"))
        read("DISPATCHER_DEMO", "demo", _on_off)
        values.setdefault("demo", "database_url" not in values)
        read("DISPATCHER_POOL_SIZE", "pool_size", _int_between(2, 1000))
        read("DISPATCHER_STARTUP_TIMEOUT", "startup_timeout", _float_between(0.0, 3600.0))
        read("DISPATCHER_MAX_REQUESTS_IN_PROGRESS", "max_requests_in_progress",
             _int_between(1, 100_000))  # fmt: skip
        values.setdefault(
            "max_requests_in_progress", REQUESTS_PER_CONNECTION * values.get("pool_size", 10)
        )
        read("DISPATCHER_ADMISSION_TIMEOUT", "admission_timeout", _float_between(0.0, 10.0))
        read("DISPATCHER_POOL_ACQUIRE_TIMEOUT", "pool_acquire_timeout", _float_between(0.01, 60.0))
        read("DISPATCHER_HEAD_TIMEOUT", "head_timeout", _float_between(0.1, 600.0))
        read("DISPATCHER_BODY_TIMEOUT", "body_timeout", _float_between(0.1, 3600.0))
        read("DISPATCHER_KEEPALIVE_TIMEOUT", "keepalive_timeout", _float_between(0.1, 3600.0))
        read("DISPATCHER_MAX_CONNECTIONS", "max_connections", _int_between(1, 1_000_000))
        read("DISPATCHER_RETRY_SCHEDULE", "retry_schedule", _schedule)
        read("DISPATCHER_REQUEST_TIMEOUT", "request_timeout", _float_between(0.1, 30.0))
        read("DISPATCHER_DISABLE_AFTER", "disable_after", _float_between(0.0, 10 * 365 * 86400))
        read("DISPATCHER_ALLOWED_CIDRS", "allowed_cidrs", _cidrs)
        read("DISPATCHER_MAX_CONCURRENCY_PER_WEBHOOK", "max_concurrency_per_webhook",
             _int_between(1, 1000))  # fmt: skip
        read("DISPATCHER_MAX_IN_FLIGHT", "max_in_flight", _int_between(1, 100_000))
        read("DISPATCHER_CLAIM_BATCH_SIZE", "claim_batch_size", _int_between(1, 10_000))
        read("DISPATCHER_POLL_INTERVAL", "poll_interval", _float_between(0.01, 60.0))
        read("DISPATCHER_SHUTDOWN_TIMEOUT", "shutdown_timeout", _float_between(0.0, 600.0))
        read("DISPATCHER_LEASE_MARGIN", "lease_margin", _float_between(1.0, 3600.0))
        read("DISPATCHER_HEARTBEAT_TIMEOUT", "heartbeat_timeout", _float_between(1.0, 600.0))
        read("DISPATCHER_SECRET_ROTATION_GRACE", "secret_rotation_grace",
             _float_between(0.0, 30 * 86400))  # fmt: skip
        read("DISPATCHER_RESPONSE_EXCERPT_BYTES", "response_excerpt_bytes",
             _int_between(0, 65536))  # fmt: skip
        read("DISPATCHER_RETENTION_DAYS", "retention_days", _int_between(1, 3650))
        read("DISPATCHER_MAINTENANCE_INTERVAL", "maintenance_interval", _float_between(1.0, 86400))
        read("DISPATCHER_SANDBOX_DELAY", "sandbox_delay", _float_between(0.0, 3600.0))
        read("DISPATCHER_METRICS_PORT", "metrics_port", _port)
        read("DISPATCHER_METRICS_PER_WEBHOOK", "metrics_per_webhook", _on_off)
        read("DISPATCHER_METRICS_PER_WEBHOOK_LIMIT", "metrics_per_webhook_limit",
             _int_between(1, 100_000))  # fmt: skip
        read("DISPATCHER_OPERATOR_WEBHOOK_URL", "operator_webhook_url", check_webhook_url)
        read("DISPATCHER_PUBLIC_URL", "public_url", _public_url)
        _read_secret(env, values)
        values["admin_token"] = _admin_token(env.get(ADMIN_TOKEN_VARIABLE))
        values["egress_proxy"] = _egress_proxy(env.get(PROXY_SETTING))
        return cls(**values)

    def with_changes(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict safe to log: passwords in URLs are masked."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("database_url", "operator_webhook_url") and value:
                value = redact_url(value)
            elif f.name == "operator_webhook_secret" and value:
                value = "***"
            elif f.name == "allowed_cidrs":
                value = [str(n) for n in value]
            elif f.name == "admin_token":
                value = "***" if value else None
            elif f.name == "egress_proxy" and value is not None:
                value = value.url
            out[f.name] = value
        return out


PREFIX = "DISPATCHER_"


class _Asked(Mapping[str, str]):
    """An empty environment that remembers every name it is asked for."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.names.add(name)
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        self.names.add(name)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


@functools.cache
def known_variables() -> frozenset[str]:
    """Every DISPATCHER_* variable a setting is read from: the names `Settings.from_env` asks
    the environment for (so that this list can never fall behind the settings)."""
    asked = _Asked()
    Settings.from_env(asked)
    return frozenset(name for name in asked.names if name.startswith(PREFIX))


def unknown_variables(env: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """The DISPATCHER_* variables of `env` that no setting reads (a typo is otherwise
    silently ignored, and its setting left at its default), each with the closest known
    name, when one is close."""
    env = os.environ if env is None else env
    known = known_variables()
    return [(name, _closest(name, known)) for name in sorted(env)
            if name.startswith(PREFIX) and name not in known]  # fmt: skip


def _closest(name: str, known: frozenset[str]) -> str | None:
    """The known name closest to `name`, compared without the prefix they all share (which
    would make any two look alike)."""
    # Upper case too: a variable spelled in lower case is the commonest slip of all.
    rest = name.removeprefix(PREFIX).upper()
    suffixes = [known_name.removeprefix(PREFIX) for known_name in sorted(known)]
    found = difflib.get_close_matches(rest, suffixes, n=1, cutoff=0.75)
    return PREFIX + found[0] if found else None


def _read_secret(env: Mapping[str, str], values: dict[str, Any]) -> None:
    """DISPATCHER_OPERATOR_WEBHOOK_SECRET: required with the sink's URL, and never repeated in
    an error (it is a secret)."""
    name = "DISPATCHER_OPERATOR_WEBHOOK_SECRET"
    raw = env.get(name, "").strip()
    if not raw:
        if "operator_webhook_url" in values:
            raise ConfigurationError(
                f"{name} is required when DISPATCHER_OPERATOR_WEBHOOK_URL is set "
                "(whsec_ and the base64 of 24 to 64 random bytes)"
            )
        return
    try:
        values["operator_webhook_secret"] = check_secret(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} is not valid: {exc}") from None


def redact_url(url: str) -> str:
    """Mask the password of a connection URL (`postgres://user:***@host/db`)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, location = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{location}" if ":" in credentials else url


def _admin_token(raw: str | None) -> str | None:
    """The admin token, or None when unset. Refused when short, or when it holds what an
    `Authorization` header cannot carry as sent (spaces, controls, non-ASCII); the message
    names the variable and never repeats the value (unlike the other settings': a secret)."""
    if raw is None or raw == "":
        return None
    if len(raw) < ADMIN_TOKEN_MIN_LENGTH or not all("!" <= char <= "~" for char in raw):
        raise ConfigurationError(
            f"{ADMIN_TOKEN_VARIABLE} must be at least {ADMIN_TOKEN_MIN_LENGTH} printable ASCII "
            "characters without spaces (e.g. the output of `openssl rand -hex 32`)"
        )
    return raw


def _egress_proxy(raw: str | None) -> EgressProxy | None:
    """DISPATCHER_EGRESS_PROXY, or None when unset; an error names the variable and never
    repeats the value (it may hold the proxy's password)."""
    if raw is None or raw.strip() == "":
        return None
    try:
        return parse_egress_proxy(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{PROXY_SETTING} is not valid: {exc}") from None


def _public_url(raw: str) -> str:
    """An http(s) URL without query, fragment or user, its trailing slash dropped."""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL, e.g. https://dispatcher.example.com")
    if parts.query or parts.fragment or "@" in parts.netloc or any(c.isspace() for c in raw):
        raise ValueError("must have no query, fragment, user or spaces")
    return raw.rstrip("/")


def _on_off(raw: str) -> bool:
    value = raw.lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise ValueError("expected on or off")


def _checked(
    convert: Callable[[str], T], valid: Callable[[T], bool], expected: str
) -> Callable[[str], T]:
    """The one parser of the settings that are converted, then checked: `convert`'s own
    ValueError says what is wrong with the text; a value `valid` refuses is "expected
    {expected}" (which `read` puts after the variable's name and value)."""

    def parse(raw: str) -> T:
        value = convert(raw)
        if not valid(value):
            raise ValueError(f"expected {expected}")
        return value

    return parse


def _choice(*allowed: str) -> Callable[[str], str]:
    return _checked(str.lower, allowed.__contains__, f"one of {', '.join(allowed)}")


def _int_between(low: int, high: int) -> Callable[[str], int]:
    return _checked(int, lambda value: low <= value <= high, f"{low}..{high}")


def _float_between(low: float, high: float) -> Callable[[str], float]:
    return _checked(float, lambda value: low <= value <= high, f"{low:g}..{high:g}")


_port = _int_between(0, 65535)

_schedule = _checked(
    lambda raw: tuple(float(part) for part in raw.split(",")),
    lambda delays: bool(delays) and not any(delay < 0 for delay in delays),
    "comma-separated non-negative seconds",
)


def _cidrs(raw: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in raw.split(","))
