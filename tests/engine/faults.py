"""Engines whose sender is given options (a resolver, a fault hook), and what users must not
read in the errors it records."""

from __future__ import annotations

import re
from typing import Any

from dispatcher.engine.sender import Sender
from dispatcher.engine.worker import Engine
from tests.receiver import EngineFactory

# What users read must not name exception classes, codecs or libraries.
TECHNICAL = re.compile(r"(?i)[a-z]+Error\b|Exception|idna|codec|aiohttp|Client[A-Z]")


async def engine_with(make_engine: EngineFactory, **sender_options: Any) -> Engine:
    engine = await make_engine(start=False, retry_schedule=(1.0,), disable_after=10**8)
    engine.sender = Sender(
        timeout=engine.settings.request_timeout,
        allowed=engine.settings.allowed_cidrs,
        max_connections=10,
        **sender_options,
    )
    await engine.start()
    return engine
