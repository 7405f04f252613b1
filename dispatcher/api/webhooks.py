"""Webhook subscriptions, their secrets and their deliveries: the resource's shapes (what a
client sends, what it is answered) and its routes.

An endpoint's options are the domain's (domain/endpoints.py `EndpointOptions`). Those the API
passes through as they are (null: the default, a global setting; answered as stored) are
declared once, in the domain (`endpoints.PASSED`: API name, bounded type, meaning), and
`PassedOptions` is made of them: the create and the PATCH take them from there
(`CreateWebhook` and `UpdateWebhook` inherit it), the answer's type is made of its fields
(`Webhook`), each field is the domain option of its snake_case name, and `_options` and
`_changes` carry them to the store without naming them. The others are written out below, each
with what the API makes of it (a name "" clears it, a `{}` filter is none, the answer's
`maxConcurrency` is the default's value when unset, ...). Svix's In/Patch/Out."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, cast

import structlog
from aiohttp import web
from pydantic import MISSING, AwareDatetime, Field, create_model
from typing_extensions import TypedDict

from dispatcher.api import endpoint_auth
from dispatcher.api.endpoint_auth import OAuth2Auth, OAuth2AuthChange, WebhookAuth
from dispatcher.api.endpoint_tls import Tls, TlsOut, stored_tls, tls_out
from dispatcher.api.framework.context import Services
from dispatcher.api.framework.found import found, not_found
from dispatcher.api.framework.pagination import Listing, PageQuery
from dispatcher.api.framework.query import choice, id_of, instant
from dispatcher.api.framework.routing import Rendered, Routes
from dispatcher.api.models import (
    Body,
    Concurrency,
    EventTypes,
    HeaderMap,
    JsonObject,
    Name,
    NumberIds,
    PayloadFilter,
    RateLimit,
    WebhookUrl,
)
from dispatcher.api.numbers import own_numbers
from dispatcher.api.parents import InWebhook
from dispatcher.api.resources import Delivery, delivery
from dispatcher.domain import endpoints, ids
from dispatcher.domain.clock import isoformat, isoformat_or_none
from dispatcher.domain.endpoints import EndpointOptions
from dispatcher.domain.enums import DeliveryStatus, DisabledReason, Ordering, Scope
from dispatcher.domain.events import EVENT_TYPES, TEST_EVENT
from dispatcher.domain.headers import FIELDS as HEADER_FIELDS
from dispatcher.domain.headers import HEADERS, SECRET_HEADERS, header_problems, names_in_order
from dispatcher.domain.payload_filter import FILTER, stored_filter
from dispatcher.domain.poll import WebhookMode
from dispatcher.domain.resources import Timestamp
from dispatcher.errors import Conflict, FieldError, ValidationFailed
from dispatcher.store import deliveries, webhooks
from dispatcher.store.pages import Page as StorePage
from dispatcher.store.rows import DeliveryRow, LockedWebhookRow, WebhookRow
from dispatcher.store.webhooks import WebhookChanges
from dispatcher.store.workspaces import ApiKey

# -- the options passed through ----------------------------------------------------------------


if TYPE_CHECKING:

    class PassedOptions(Body):
        """The options the API passes through (made of domain/endpoints.py `PASSED` at run
        time)."""

    class PassedOptionsOut(TypedDict):
        """`PassedOptions` as answered (made of its fields at run time)."""

else:
    PassedOptions = create_model(
        "PassedOptions",
        __base__=Body,
        __doc__="""The options the API passes through: created and patched as the domain
        declares them (absent or null: the default), answered as stored. A new such option is
        one entry of domain/endpoints.py `PASSED` (after its field and its column): nothing in
        the API names it.""",
        **{passed.name: (passed.type | None, None) for passed in endpoints.PASSED},
    )
    PassedOptionsOut = TypedDict(
        "PassedOptionsOut", {passed.name: passed.type | None for passed in endpoints.PASSED}
    )

PASSED: tuple[str, ...] = tuple(passed.name for passed in endpoints.PASSED)
_option = endpoints.option_of


def _passed_in(body: PassedOptions, fields: Collection[str] = PASSED) -> dict[str, Any]:
    """The passed options of a body, by domain option (only `fields` of them)."""
    return {_option(field): getattr(body, field) for field in PASSED if field in fields}


def _passed_out(options: EndpointOptions) -> PassedOptionsOut:
    return cast(PassedOptionsOut, {field: getattr(options, _option(field)) for field in PASSED})


# -- bodies ------------------------------------------------------------------------------------


class _CreateFields(Body):
    # Required for a push webhook; a poll webhook has none (`mode`, below).
    url: WebhookUrl | None = None
    events: EventTypes
    name: Name | None = None
    numberIds: NumberIds | None = None
    maxConcurrency: Concurrency | None = None
    headers: HeaderMap | None = None
    secretHeaders: HeaderMap | None = None
    filter: PayloadFilter | None = None
    rateLimit: RateLimit | None = None
    ordering: Ordering = Field(default=Ordering.NONE, strict=False)
    auth: OAuth2Auth | None = None
    tls: Tls | None = None  # mutual TLS (api/endpoint_tls.py)
    # "push" (the default): deliveries POSTed to `url`; "poll": no url, the events read by
    # GET /v1/webhooks/{id}/poll (docs/webhooks.md, "Poll mode"). Fixed at creation.
    mode: WebhookMode = Field(default=WebhookMode.PUSH, strict=False)


# (PassedOptions first: pydantic orders the fields base by base from the last, so its come last.)
class CreateWebhook(PassedOptions, _CreateFields):
    pass


class _UpdateFields(Body):
    url: WebhookUrl | MISSING = MISSING
    events: EventTypes | MISSING = MISSING
    name: Name | None = None
    numberIds: NumberIds | None = None
    enabled: bool | MISSING = MISSING
    maxConcurrency: Concurrency | None = None
    rateLimit: RateLimit | None = None
    # null is the default, "none", as a null maxConcurrency is the default limit.
    ordering: Ordering | None = Field(default=None, strict=False)
    headers: HeaderMap | None = None
    secretHeaders: HeaderMap | None = None
    filter: PayloadFilter | None = None
    auth: OAuth2AuthChange | None = None  # null removes it; see api/endpoint_auth.py
    tls: Tls | None = None  # replaced whole; null removes it


class UpdateWebhook(PassedOptions, _UpdateFields):
    """PATCH: absent keeps; see the interface's table for null and empty values. `url`,
    `events` and `enabled` may be absent but not null (`MISSING` when absent)."""


class FilterTest(Body):
    """Try a payload filter: the webhook's saved one, or `filter` when given."""

    data: JsonObject
    filter: PayloadFilter | None = None


class Recover(Body):
    since: AwareDatetime = Field(strict=False)
    until: AwareDatetime | None = Field(default=None, strict=False)


# -- answers -----------------------------------------------------------------------------------


class _WebhookFields(TypedDict):
    id: str
    createdAt: Timestamp
    disabledAt: Timestamp | None
    disabledReason: DisabledReason | None
    events: list[str]
    name: str | None
    numberIds: list[str] | None
    url: str | None
    maxConcurrency: int
    headers: dict[str, str]
    secretHeaderNames: list[str]
    filter: dict[str, Any] | None
    rateLimit: int | None
    ordering: Ordering
    auth: WebhookAuth | None
    tls: TlsOut | None
    mode: WebhookMode


class Webhook(_WebhookFields, PassedOptionsOut):
    """A subscription: which events go to which URL (its signing secret is read apart), with
    the headers sent along (secret ones by name only) and its payload filter."""


class WebhookWithSecret(Webhook):
    """A webhook as created: the only answer that carries its secret besides the secret's own."""

    secret: str


class FilterMatch(TypedDict):
    """Whether the data given contains the filter (`@>`), as fan-out would decide it."""

    matches: bool


class Secret(TypedDict):
    """A webhook's current signing secret (`whsec_…`)."""

    secret: str


class Recovered(TypedDict):
    """How many deliveries a recover queued."""

    queued: int


def webhook(row: WebhookRow, default_concurrency: int) -> Webhook:
    reason, options = row.disabled_reason, row.options
    return {
        "id": row.id,
        "createdAt": isoformat(row.created_at),
        "disabledAt": isoformat_or_none(row.disabled_at),
        "disabledReason": None if reason is None else DisabledReason(reason),
        "events": options.events,
        "name": options.name,
        "numberIds": options.number_ids,
        "url": options.url,
        "maxConcurrency": options.max_concurrency or default_concurrency,
        "headers": options.headers,
        "secretHeaderNames": names_in_order(options.secret_headers),
        "filter": options.payload_filter,
        "rateLimit": options.rate_limit,
        "ordering": Ordering(options.ordering),
        "auth": endpoint_auth.answered(options.auth),
        "tls": tls_out(options.tls),
        "mode": WebhookMode(options.mode),
        **_passed_out(options),
    }


def webhook_with_secret(
    row: WebhookRow, default_concurrency: int, secret: str
) -> WebhookWithSecret:
    return {**webhook(row, default_concurrency), "secret": secret}


# -- routes ------------------------------------------------------------------------------------

routes = Routes()
log = structlog.get_logger("dispatcher.api")

RECOVER_WINDOW = timedelta(days=14)


class DeliveryQuery(PageQuery):
    status: Annotated[str | None, choice(DeliveryStatus)] = None
    event: Annotated[str | None, choice(sorted(EVENT_TYPES | {TEST_EVENT}))] = None
    eventId: Annotated[str | None, id_of(ids.EVENT)] = None
    since: Annotated[str | None, instant("deliveries created at or after this time")] = None
    until: Annotated[str | None, instant("deliveries created before this time")] = None


def _webhook(svc: Services, row: WebhookRow) -> Webhook:
    return webhook(row, svc.settings.max_concurrency_per_webhook)


async def _check_numbers(svc: Services, workspace_id: str, number_ids: list[str] | None) -> None:
    if number_ids:
        await own_numbers(svc, workspace_id, "body.numberIds", number_ids)


def _check_headers(
    headers: Mapping[str, str], secret_headers: Mapping[str, str], changed: Collection[str]
) -> None:
    """Refuse custom headers that break a rule (domain/headers.py), naming the field."""
    problems = header_problems(headers, secret_headers, changed=changed)
    if problems:
        raise ValidationFailed([FieldError(f"body.{p.field}", p.message) for p in problems])


def _check_mode(mode: WebhookMode, url: str | None) -> None:
    """A push webhook needs its url; a poll webhook has none."""
    if mode == WebhookMode.PUSH and url is None:
        raise ValidationFailed([FieldError("body.url", "is required for a push webhook")])
    if mode == WebhookMode.POLL and url is not None:
        raise ValidationFailed(
            [FieldError("body.url", "must be absent: a poll webhook has no url (mode poll)")]
        )


async def _refuse_poll(svc: Services, key: ApiKey, webhook_id: str) -> None:
    """A poll webhook has no deliveries: a test, a retry or a recover of one is a 409."""
    hook = await webhooks.find(svc.db, key.workspace_id, webhook_id)
    if hook is not None and hook.options.mode == WebhookMode.POLL:
        raise Conflict(
            f"webhook {webhook_id} is a poll webhook: it has no deliveries, its events are read"
            f" by GET /v1/webhooks/{webhook_id}/poll"
        )


@routes.post(
    "/v1/webhooks", Scope.WEBHOOKS_WRITE, WebhookWithSecret, status=201, body=CreateWebhook
)
async def create_webhook(
    request: web.Request, svc: Services, key: ApiKey, body: CreateWebhook
) -> Rendered[WebhookWithSecret]:
    _check_mode(body.mode, body.url)
    headers, secret_headers = body.headers or {}, body.secretHeaders or {}
    _check_headers(headers, secret_headers, body.model_fields_set)
    await _check_numbers(svc, key.workspace_id, body.numberIds)
    answers: list[Rendered[WebhookWithSecret]] = []

    def answer(row: WebhookRow, signing_secret: str) -> None:
        """Rendered before the insert commits: an answer that cannot be written stores
        nothing (never a live webhook whose id and secret the client did not see)."""
        limit = svc.settings.max_concurrency_per_webhook
        answers.append(Rendered.of(webhook_with_secret(row, limit, signing_secret)))

    options = EndpointOptions(
        url=body.url,
        events=body.events,
        name=body.name or None,
        number_ids=body.numberIds,
        max_concurrency=body.maxConcurrency,
        headers=headers,
        secret_headers=secret_headers,
        payload_filter=stored_filter(body.filter),
        rate_limit=body.rateLimit,
        ordering=body.ordering,
        auth=endpoint_auth.stored(body.auth),
        tls=stored_tls(body.tls, svc.clock.now()),
        **_passed_in(body),
        mode=body.mode,
    )
    await webhooks.create(
        svc.db, workspace_id=key.workspace_id, options=options, now=svc.clock.now(), answer=answer
    )
    return answers[0]


@routes.list("/v1/webhooks", Scope.WEBHOOKS_READ, render_with_services=_webhook, cursor="webhooks")
async def list_webhooks(at: Listing, query: PageQuery) -> StorePage[WebhookRow]:
    return await webhooks.list_page(at.db, at.workspace_id, **at.page)


@routes.get("/v1/webhooks/{webhook_id}", Scope.WEBHOOKS_READ, Webhook)
async def get_webhook(request: web.Request, svc: Services, key: ApiKey) -> Webhook:
    row = await webhooks.find(svc.db, key.workspace_id, request.match_info["webhook_id"])
    return _webhook(svc, found(row, "webhook"))


def _changes(body: UpdateWebhook, now: datetime) -> WebhookChanges:
    """The PATCH as the store takes it: each field present (a null `url`, `events` or
    `enabled` was refused by the model), by column, its null or empty value made what is
    stored."""
    present = body.model_fields_set
    changes: WebhookChanges = {}
    if body.url is not MISSING:
        changes["url"] = body.url
    if body.events is not MISSING:
        changes["events"] = body.events
    if "name" in present:
        changes["name"] = body.name or None  # null or "" clears the name
    if "numberIds" in present:
        changes["number_ids"] = body.numberIds
    if "maxConcurrency" in present:
        changes["max_concurrency"] = body.maxConcurrency
    if HEADERS in present:
        changes["headers"] = body.headers or {}  # replaced whole; null or {} clears
    if SECRET_HEADERS in present:
        changes["secret_headers"] = body.secretHeaders or {}
    if FILTER in present:
        changes["payload_filter"] = stored_filter(body.filter)
    if "rateLimit" in present:
        changes["rate_limit"] = body.rateLimit
    if "ordering" in present:
        changes["ordering"] = body.ordering or Ordering.NONE  # null returns to the default
    if body.enabled is not MISSING:
        changes["enabled"] = body.enabled
    if "auth" in present:  # made what is stored under the lock (`update_webhook`'s check)
        changes["auth"] = None
    if "tls" in present:
        changes["tls"] = stored_tls(body.tls, now)
    changes.update(cast(WebhookChanges, _passed_in(body, present)))
    return changes


@routes.patch("/v1/webhooks/{webhook_id}", Scope.WEBHOOKS_WRITE, Webhook, body=UpdateWebhook)
async def update_webhook(
    request: web.Request, svc: Services, key: ApiKey, body: UpdateWebhook
) -> Rendered[Webhook]:
    present = body.model_fields_set
    changes = _changes(body, svc.clock.now())
    header_changes = present & set(HEADER_FIELDS)

    def check(current: LockedWebhookRow) -> None:
        """The headers as they would be stored, checked under the webhook's lock: a PATCH of
        one object is checked with the other as it is. A poll webhook takes no url."""
        if "url" in changes and current.mode == WebhookMode.POLL:
            _check_mode(WebhookMode.POLL, changes["url"])
        if header_changes:
            _check_headers(
                changes.get("headers", current.headers),
                changes.get("secret_headers", current.secret_headers),
                header_changes,
            )
        if "auth" in present:  # its client secret may be the stored one
            changes["auth"] = endpoint_auth.kept_secret(body.auth, current.auth)

    await _check_numbers(svc, key.workspace_id, changes.get("number_ids"))
    answers: list[Rendered[Webhook]] = []

    def answer(row: WebhookRow) -> None:
        """Rendered before the change commits: an answer that cannot be written undoes it."""
        answers.append(Rendered.of(_webhook(svc, row)))

    updated = await webhooks.update(
        svc.db,
        key.workspace_id,
        request.match_info["webhook_id"],
        changes,
        svc.clock.now(),
        check=check,
        answer=answer,
    )
    row = found(updated, "webhook")
    if changes.get("enabled") is False:
        log.info("webhook.disabled", webhook_id=row.id, reason=row.disabled_reason)
    return answers[0]


@routes.delete("/v1/webhooks/{webhook_id}", Scope.WEBHOOKS_WRITE, status=204)
async def delete_webhook(request: web.Request, svc: Services, key: ApiKey) -> None:
    webhook_id = request.match_info["webhook_id"]
    if not await webhooks.delete(svc.db, key.workspace_id, webhook_id, svc.clock.now()):
        raise not_found("webhook")


@routes.get("/v1/webhooks/{webhook_id}/secret", Scope.WEBHOOKS_READ, Secret)
async def get_webhook_secret(request: web.Request, svc: Services, key: ApiKey) -> Secret:
    current = await webhooks.secret(svc.db, key.workspace_id, request.match_info["webhook_id"])
    return {"secret": found(current, "webhook")}


@routes.post("/v1/webhooks/{webhook_id}/secret/rotate", Scope.WEBHOOKS_WRITE, Secret)
async def rotate_webhook_secret(request: web.Request, svc: Services, key: ApiKey) -> Secret:
    grace = timedelta(seconds=svc.settings.secret_rotation_grace)
    current = await webhooks.rotate_secret(
        svc.db, key.workspace_id, request.match_info["webhook_id"], grace, svc.clock.now()
    )
    return {"secret": found(current, "webhook")}


@routes.post(
    "/v1/webhooks/{webhook_id}/filter/test", Scope.WEBHOOKS_READ, FilterMatch, body=FilterTest
)
async def test_webhook_filter(
    request: web.Request, svc: Services, key: ApiKey, body: FilterTest
) -> FilterMatch:
    """Whether `data` would pass the webhook's saved filter, or the `filter` given instead
    (null or `{}`: no filter): answered by the database's `@>`, as fan-out decides."""
    given = FILTER in body.model_fields_set
    matches = await webhooks.filter_matches(
        svc.db,
        key.workspace_id,
        request.match_info["webhook_id"],
        body.data,
        given=given,
        payload_filter=stored_filter(body.filter),
    )
    return {"matches": found(matches, "webhook")}


@routes.list(
    "/v1/webhooks/{webhook_id}/deliveries", Scope.WEBHOOKS_READ, delivery, cursor="deliveries"
)
async def list_deliveries(at: InWebhook, query: DeliveryQuery) -> StorePage[DeliveryRow]:
    return await deliveries.list_page(
        at.db,
        at.workspace_id,
        at.path["webhook_id"],
        status=query.status,
        event=query.event,
        event_id=query.eventId,
        **query.time_range(),
        **at.page,
    )


@routes.get("/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", Scope.WEBHOOKS_READ, Delivery)
async def get_delivery(request: web.Request, svc: Services, key: ApiKey) -> Delivery:
    row = await deliveries.get(
        svc.db,
        key.workspace_id,
        request.match_info["webhook_id"],
        request.match_info["delivery_id"],
    )
    return delivery(found(row, "delivery"))


@routes.post(
    "/v1/webhooks/{webhook_id}/test", Scope.WEBHOOKS_WRITE, Delivery, status=202, errors=(409,)
)
async def test_webhook(request: web.Request, svc: Services, key: ApiKey) -> Delivery:
    await _refuse_poll(svc, key, request.match_info["webhook_id"])
    row = await deliveries.create_test(
        svc.db, key.workspace_id, request.match_info["webhook_id"], svc.clock.now()
    )
    return delivery(row)


@routes.post(
    "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry",
    Scope.WEBHOOKS_WRITE,
    Delivery,
    status=202,
    errors=(409,),
)
async def retry_delivery(request: web.Request, svc: Services, key: ApiKey) -> Delivery:
    await _refuse_poll(svc, key, request.match_info["webhook_id"])
    row = await deliveries.retry(
        svc.db,
        key.workspace_id,
        request.match_info["webhook_id"],
        request.match_info["delivery_id"],
        svc.clock.now(),
    )
    return delivery(row)


@routes.post(
    "/v1/webhooks/{webhook_id}/recover",
    Scope.WEBHOOKS_WRITE,
    Recovered,
    status=202,
    body=Recover,
    errors=(409,),
)
async def recover_webhook(
    request: web.Request, svc: Services, key: ApiKey, body: Recover
) -> Recovered:
    await _refuse_poll(svc, key, request.match_info["webhook_id"])
    now = svc.clock.now()
    until = body.until or now
    if body.since < now - RECOVER_WINDOW:
        raise ValidationFailed([FieldError("body.since", "must be at most 14 days ago")])
    if until <= body.since:
        raise ValidationFailed([FieldError("body.until", "must be after `since`")])
    queued = await deliveries.recover(
        svc.db, key.workspace_id, request.match_info["webhook_id"], body.since, until, now
    )
    return {"queued": queued}
