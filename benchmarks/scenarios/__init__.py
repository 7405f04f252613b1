"""One module per scenario, run in this order; each has NAME, TITLE and `async run(Run)`."""

from __future__ import annotations

import importlib
import time
import traceback
from types import ModuleType
from typing import Any

ORDER = (
    "ceiling",
    "drain",
    "peer",
    "cpu",
    "latency",
    "api",
    "isolation",
    "takeover",
    "fanout",
    "backlog",
    "replicas",
    "hotspots",
    "fairness",
    "overload",
    "idle",
    "publish",
    "poll",
)


def module(name: str) -> ModuleType:
    if name not in ORDER:
        raise ValueError(f"unknown scenario {name!r}; one of: {', '.join(ORDER)}")
    return importlib.import_module(f"benchmarks.scenarios.{name}")


async def run_scenario(r: Any, name: str) -> dict[str, Any]:
    """Run one scenario and write its JSON; a failure is recorded (met: false), not raised."""
    from benchmarks.common import git_commit, write_result

    mod = module(name)
    commit = git_commit()  # the code the scenario starts with
    r.log(f"== {mod.TITLE}")
    started = time.monotonic()
    try:
        result: dict[str, Any] = await mod.run(r)
    except Exception as exc:
        r.log(f"{name} FAILED: {exc!r}")
        result = {
            "title": mod.TITLE,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
            "met": False,
            "summary": {"measured": f"error: {type(exc).__name__}", "baseline": "—", "ratio": "—"},
        }
        target = getattr(mod, "TARGET_TEXT", None)
        if target:
            result["target"] = {"text": target}
    result["duration_seconds"] = round(time.monotonic() - started, 1)
    return write_result(r, name, result, commit=commit)
