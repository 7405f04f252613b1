"""The deployment files pass the linters people point at them: hadolint on every Dockerfile
(any finding, down to style, fails) and kubernetes-validate, strict (unknown fields are
errors), on every Kubernetes manifest. Skipped, naming the tool, where it is not installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.tools import tool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DOCKERFILES = sorted(DEPLOY.rglob("Dockerfile"))
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    done = subprocess.run(
        [tool("hadolint"), "--no-color", "--failure-threshold", "style", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_there_are_manifests() -> None:
    assert {p.name for p in MANIFESTS} >= {"deployment.yaml", "sidecar.yaml", "worker.yaml"}


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_kubernetes_validate_strict_passes(manifest: Path) -> None:
    done = subprocess.run(
        [tool("kubernetes-validate"), "--strict", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed" in done.stdout and "ERROR" not in done.stdout + done.stderr
    assert "WARN" not in done.stdout + done.stderr, done.stdout + done.stderr
