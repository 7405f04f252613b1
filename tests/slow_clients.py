"""Slow clients, shared by the API test (tests/api/test_slow_clients.py) and the process one
(tests/e2e/test_slowloris.py): how many, the half head they send, the open-file limit."""

from __future__ import annotations

import resource

import pytest

SLOW_CONNECTIONS = 2000


HALF_HEAD = b"GET /v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def enough_open_files(needed: int) -> None:
    """Both ends of every connection live in this process: raise the soft open-file limit
    (never above the hard one) so that the test measures the server, not the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        ceiling = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        soft = ceiling
    if soft != resource.RLIM_INFINITY and soft < needed:
        pytest.skip(f"the open-file limit ({soft}) is below the {needed} this test needs")
