"""A misspelled DISPATCHER_* variable is not silently ignored: start-up warns, naming it and
the closest known name (a typo otherwise leaves its setting at the default unnoticed)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

from dispatcher.settings import known_variables, unknown_variables

DOCUMENTED = set(
    re.findall(
        r"^\| `(DISPATCHER_[A-Z_]+)` \|",
        (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(),
        re.MULTILINE,
    )
)


def test_the_known_names_are_the_documented_ones() -> None:
    """Known: every name a setting is read from; the docs' table lists exactly those."""
    assert known_variables() == DOCUMENTED


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("DISPATCHER_POOL_SIZ", "DISPATCHER_POOL_SIZE"),
        ("DISPATCHER_POOLSIZE", "DISPATCHER_POOL_SIZE"),
        ("DISPATCHER_DEMOO", "DISPATCHER_DEMO"),
        ("DISPATCHER_MAX_CONECTIONS", "DISPATCHER_MAX_CONNECTIONS"),
        ("DISPATCHER_RETRY_SCHEDUEL", "DISPATCHER_RETRY_SCHEDULE"),
        ("DISPATCHER_log_level", "DISPATCHER_LOG_LEVEL"),
        ("DISPATCHER_ADMIN_TOKN", "DISPATCHER_ADMIN_TOKEN"),
        ("DISPATCHER_XYZZY", None),
    ],
)
def test_an_unknown_name_is_told_with_the_closest_known_one(name: str, closest: str) -> None:
    env = {name: "1", "DISPATCHER_PORT": "9", "HOME": "/", "DATABASE_URL": "postgresql://x"}
    assert unknown_variables(env) == [(name, closest)]


def test_every_known_name_passes() -> None:
    assert unknown_variables(dict.fromkeys(known_variables(), "")) == []


async def test_start_up_warns_naming_the_variable(database_url: str) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")},
        "DATABASE_URL": database_url,
        "DISPATCHER_LOG_FORMAT": "json",
        "DISPATCHER_POOL_SIZ": "4",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "migrate",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    warnings = [
        event
        for event in map(json.loads, err.decode().splitlines())
        if event.get("event") == "settings.unknown_variable"
    ]
    assert len(warnings) == 1, err.decode()
    assert warnings[0]["variable"] == "DISPATCHER_POOL_SIZ"
    assert warnings[0]["did_you_mean"] == "DISPATCHER_POOL_SIZE"
    assert warnings[0]["level"] == "warning"
