"""Databases made outside the test template: empty, or at the first release's schema."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from tests.databases import with_database

# The first release's schema.sql, byte for byte (`git show c801a91:schema.sql`): the schema
# every database made before migrations existed is at.
SCHEMA_V1 = Path(__file__).with_name("schema_v1.sql")

NewDatabase = Callable[..., Awaitable[str]]


@pytest.fixture
async def new_database(server_url: str) -> AsyncIterator[NewDatabase]:
    """Makes empty databases (not from the test template), optionally at schema version 1;
    drops them afterwards."""
    made: list[str] = []
    admin = await asyncpg.connect(server_url)

    async def make(*, v1: bool = False) -> str:
        name = f"dispatcher_mig_{uuid.uuid4().hex[:12]}"
        await admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        url = with_database(server_url, name)
        if v1:
            conn = await asyncpg.connect(url)
            try:
                await conn.execute(SCHEMA_V1.read_text())
            finally:
                await conn.close()
        return url

    try:
        yield make
    finally:
        for name in made:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def versions(url: str) -> list[int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT version FROM dispatcher_schema ORDER BY version")
    finally:
        await conn.close()
    return [row["version"] for row in rows]
