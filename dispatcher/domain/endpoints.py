"""An endpoint's options: the one description of what a webhook subscription may set.

Each option is one field of `EndpointOptions`, named as its column in `webhooks` (schema.sql);
its bounds are the constants below, which the API's models state (api/models.py, and through
`PASSED` below api/webhooks.py `PassedOptions`; through them the OpenAPI document the console
reads its form from) and the CHECK constraints repeat (tests/store/test_facts_agree.py keeps
the two equal). The store reads and writes an endpoint with the column list these fields make
(store/webhooks.py `option_columns`), builds a PATCH from the fields a change names
(`EndpointChanges`), and the claim hands the engine the same type (store/queue.py
`Claimed.endpoint`).

An option the API passes through as it is (null: the default, a global setting; answered as
stored) is also one entry of `PASSED`: its API name, its type with its bounds (annotated_types
constraints, which pydantic reads: this module imports no pydantic) and what it means. The
API's `PassedOptions` is made of these entries (api/webhooks.py) and the console's form of the
OpenAPI document they end in (api/console/webhooks.js), so neither names such an option.

So adding a passed-through option is: a field here, its bounds and its `PASSED` entry, its
column (a migration and schema.sql), and whatever uses it in the engine (README.md, "Adding an
endpoint option").

Which secrets sign an endpoint's requests now is `signing.signing_secrets` (a rotation's
previous secret during its grace); the secrets themselves are no option (never set by a
client, never answered but by the secret routes) and stay out of this type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, NamedTuple, TypedDict

from annotated_types import Ge, Le, MaxLen, MinLen

from dispatcher.domain.enums import Ordering

# -- bounds (the API's models, the CHECK constraints and docs/webhooks.md state these) --------

MAX_URL_LENGTH = 2048  # characters of `url`
MAX_EVENT_TYPES = 64  # entries of `events` (at least one)
MAX_NUMBER_IDS = 1000  # entries of `numberIds`
MAX_NAME_LENGTH = 255  # characters of `name`
MIN_CONCURRENCY, MAX_CONCURRENCY = 1, 1000  # `maxConcurrency`: requests in flight at once
MIN_RATE_LIMIT, MAX_RATE_LIMIT = 1, 10000  # `rateLimit`: requests a second
MIN_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS = 0.1, 30.0  # `timeoutSeconds`: an attempt's time
MIN_RETRY_DELAYS, MAX_RETRY_DELAYS = 1, 20  # entries of `retrySchedule`
MIN_RETRY_DELAY, MAX_RETRY_DELAY = 1, 86400  # each delay of `retrySchedule`, in seconds

# Options whose values never leave the store for an answer: a read for the API gets their
# names with this in place of each value (`secretHeaders` -> `secretHeaderNames`).
WITHHELD = ""
WRITE_ONLY = frozenset({"secret_headers"})
# Options (JSON objects) answered without some of their keys: `tls` without its `clientKey`
# (domain/tls.py).
WITHHELD_KEYS: dict[str, tuple[str, ...]] = {"tls": ("clientKey",)}


class EndpointOptions(NamedTuple):
    """What a subscription sets, one field per column of `webhooks` (same name), as stored.

    A NamedTuple, like the store's rows (store/rows.py), of the types the driver reads: the
    claim makes one per delivery it leases, and a tuple costs a fifth of a frozen dataclass.
    None and `{}` mean what the column's comment in schema.sql says (None `max_concurrency`:
    the setting's default)."""

    url: str | None  # None: a poll webhook's (it has none)
    events: list[str]
    name: str | None = None
    number_ids: list[str] | None = None  # None: every number
    max_concurrency: int | None = None  # None: DISPATCHER_MAX_CONCURRENCY_PER_WEBHOOK
    headers: dict[str, str] = {}  # never mutated (a NamedTuple default)
    # Read for the API, its values are WITHHELD (only the names are shown).
    secret_headers: dict[str, str] = {}
    payload_filter: dict[str, Any] | None = None  # None: no filter (`{}` is stored as None)
    rate_limit: int | None = None  # None: no limit
    ordering: str = Ordering.NONE  # an Ordering (text as the driver reads it)
    timeout_seconds: float | None = None  # None: DISPATCHER_REQUEST_TIMEOUT
    # Seconds after attempt i+1 (domain/retry.py); None: DISPATCHER_RETRY_SCHEDULE.
    retry_schedule: list[int] | None = None
    # How attempts authenticate (domain/endpoint_auth.py: OAuth 2.0 client credentials, its
    # API names as keys); None: no auth. Read for the API, without its `clientSecret`.
    auth: dict[str, Any] | None = None
    # Mutual TLS (domain/tls.py): `clientCertificate`, `clientKey`, `caCertificate` (PEM; the
    # last may be None); read for the API, without `clientKey`. None: none.
    tls: dict[str, Any] | None = None
    # A WebhookMode (domain/poll.py): "push", or "poll" (no url, no deliveries). Set when
    # the webhook is made, never changed.
    mode: str = "push"


# The options, in column order: the store's one column list.
OPTIONS: tuple[str, ...] = EndpointOptions._fields


class EndpointChanges(TypedDict, total=False):
    """A change to an endpoint, by option: a key present is set (None clears what may be
    cleared), a key absent is kept. `headers` and `secret_headers` are replaced whole (`{}`:
    none); `payload_filter` is stored as given (None: no filter); `enabled` moves the endpoint
    between live and disabled (manual), and is the one key that is no option.
    (tests/domain/test_endpoints.py keeps its keys those of `EndpointOptions`.)"""

    url: str
    events: list[str]
    name: str | None
    number_ids: list[str] | None
    max_concurrency: int | None
    headers: dict[str, str]
    secret_headers: dict[str, str]
    payload_filter: dict[str, Any] | None
    rate_limit: int | None
    ordering: Ordering
    timeout_seconds: float | None
    retry_schedule: list[int] | None
    auth: dict[str, Any] | None
    tls: dict[str, Any] | None
    mode: str
    enabled: bool


class PassedOption(NamedTuple):
    """An option the API passes through as it is: created and patched as given (absent or
    null: the default), answered as stored."""

    name: str  # the API's name, the option's in camelCase (`timeoutSeconds`: `timeout_seconds`)
    type: Any  # its type when set (null is always allowed), bounds as annotated_types constraints
    description: str  # what it means (the code's documentation; the OpenAPI document has none)


# The passed-through options, in the order the API's shapes list them.
PASSED: tuple[PassedOption, ...] = (
    PassedOption(
        "timeoutSeconds",
        Annotated[float, Ge(MIN_TIMEOUT_SECONDS), Le(MAX_TIMEOUT_SECONDS)],
        "Seconds an attempt may take, connecting included; null: DISPATCHER_REQUEST_TIMEOUT.",
    ),
    PassedOption(
        "retrySchedule",
        Annotated[
            list[Annotated[int, Ge(MIN_RETRY_DELAY), Le(MAX_RETRY_DELAY)]],
            MinLen(MIN_RETRY_DELAYS),
            MaxLen(MAX_RETRY_DELAYS),
        ],
        "Seconds after each failed attempt (attempts: its length + 1, then given up); null:"
        " DISPATCHER_RETRY_SCHEDULE.",
    ),
)


def option_of(name: str) -> str:
    """The option of an API name: `timeoutSeconds` -> `timeout_seconds`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def changed_options(changes: Mapping[str, object]) -> list[str]:
    """The options a change sets, in column order (never `enabled`, never a name that is no
    option: what a statement built from them names comes from `OPTIONS` only)."""
    return [option for option in OPTIONS if option in changes]


if not {option_of(passed.name) for passed in PASSED} <= set(OPTIONS):
    raise TypeError(f"PASSED names no option of EndpointOptions: {[p.name for p in PASSED]}")
