"""The event catalog's drift check: an event envelope is held to the JSON Schema the catalog
publishes for its type (`GET /v1/event-types`, built from domain/catalog.py).

Every request the tests' receivers get (tests/receiver.py, the `receiver` fixture) is checked
when the test ends: a body that is an event envelope must be one (`EventEnvelope`'s schema),
its `type` must be in the catalog, and its `data` (unless expunged: null) must validate
against that type's schema. A request that does not hold fails the test that produced it.
So an event builder and the catalog cannot part: the suite produces every type the service
makes (tests/api/test_event_types.py makes one of each on purpose).

A test that publishes data of its own under a type the service makes (`message.received` with
`{"id": "x"}`, which the API takes: docs/events.md, "Catalog") says so with
`@pytest.mark.free_event_data`; its receivers are not checked.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import orjson
from jsonschema import Draft202012Validator

from dispatcher.api.event_types import catalog
from dispatcher.api.framework.openapi import json_schema
from dispatcher.domain.resources import EventEnvelope

ENVELOPE_FIELDS = frozenset(EventEnvelope.__annotations__)


@functools.cache
def _envelope() -> Draft202012Validator:
    return Draft202012Validator(json_schema(EventEnvelope))


@functools.cache
def validators() -> dict[str, Draft202012Validator]:
    """One validator per type, of the schema the API publishes (the same dict it answers)."""
    published = catalog()["data"]
    for item in published:
        Draft202012Validator.check_schema(item["schema"])
    return {item["name"]: Draft202012Validator(item["schema"]) for item in published}


def envelope_problems(envelope: Any) -> list[str]:
    """What is wrong with `envelope` (a parsed delivery body) by the catalog: [] when nothing."""
    problems = [f"envelope: {error.message}" for error in _envelope().iter_errors(envelope)]
    if problems:
        return problems
    validator = validators().get(envelope["type"])
    if validator is None:
        return [f"{envelope['type']!r} is not in the event catalog"]
    if envelope["data"] is None:  # expunged
        return []
    return [
        f"{envelope['type']} data{''.join(f'[{p!r}]' for p in error.absolute_path)}: "
        f"{error.message}"
        for error in validator.iter_errors(envelope["data"])
    ]


def looks_like_an_envelope(value: Any) -> bool:
    """A JSON object with the envelope's fields and no other: a delivery's body (a test's own
    request to a receiver is left alone)."""
    return isinstance(value, dict) and set(value) == ENVELOPE_FIELDS


def body_problems(bodies: Iterable[bytes]) -> list[str]:
    """The problems of every envelope among `bodies` (request bodies a receiver got)."""
    found: list[str] = []
    for body in bodies:
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            continue
        if looks_like_an_envelope(value):
            found.extend(f"{value.get('id')}: {p}" for p in envelope_problems(value))
    return found
