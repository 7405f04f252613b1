"""The local stack (deploy/docker-compose.yml) exposes nothing beyond this machine unless asked
to, and Grafana has no default password and no anonymous access.

The file is read twice: as YAML, for the rule every published port must follow (always runs),
and through Docker Compose itself (`config`, which needs no daemon), for what the rule means
once compose interpolates it (skipped where no Compose v2 is installed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.tools import compose

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "deploy" / "docker-compose.yml"
SERVICES: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
PUBLISHED = re.compile(r"^\$\{PUBLISH_ADDRESS:-127\.0\.0\.1\}:\d+:\d+$")


def test_every_published_port_binds_publish_address_defaulting_to_loopback() -> None:
    published = 0
    for name, service in SERVICES.items():
        assert "network_mode" not in service, f"{name}: host networking publishes everything"
        for port in service.get("ports", []):
            published += 1
            assert isinstance(port, str) and PUBLISHED.match(port), (
                f"{name}: port {port!r} is not ${{PUBLISH_ADDRESS:-127.0.0.1}}:HOST:CONTAINER"
            )
    assert published >= 4  # API, receiver, Prometheus, Grafana


def test_grafana_has_no_default_password_and_no_anonymous_access() -> None:
    env = SERVICES["grafana"]["environment"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
    assert str(env.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env


def resolved(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """`compose config` as a user would run it, with only `variables` set: an empty env file
    stands in for deploy/.env, so a developer's own .env cannot change the answer."""
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PUBLISH_ADDRESS", "GRAFANA_ADMIN_PASSWORD")
    }
    env.update(variables)
    return subprocess.run(
        [
            *compose(),
            "--env-file",
            str(env_file),
            "-f",
            str(COMPOSE_FILE),
            "config",
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def host_ips(config: dict[str, Any]) -> dict[str, set[str | None]]:
    return {
        name: {port.get("host_ip") for port in service["ports"]}
        for name, service in config["services"].items()
        if service.get("ports")
    }


def test_compose_publishes_on_loopback_by_default(tmp_path: Path) -> None:
    done = resolved(tmp_path, GRAFANA_ADMIN_PASSWORD="s3cret-for-test")
    assert done.returncode == 0, done.stderr
    ips = host_ips(json.loads(done.stdout))
    assert set(ips) == {"dispatcher", "receiver", "prometheus", "grafana"}
    assert all(found == {"127.0.0.1"} for found in ips.values()), ips


def test_compose_publishes_where_asked(tmp_path: Path) -> None:
    done = resolved(tmp_path, GRAFANA_ADMIN_PASSWORD="x", PUBLISH_ADDRESS="0.0.0.0")
    assert done.returncode == 0, done.stderr
    assert all(found == {"0.0.0.0"} for found in host_ips(json.loads(done.stdout)).values())


def test_compose_refuses_to_start_grafana_without_a_password(tmp_path: Path) -> None:
    done = resolved(tmp_path)
    assert done.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in done.stderr


def test_compose_gives_grafana_the_password_and_no_anonymous_access(tmp_path: Path) -> None:
    done = resolved(tmp_path, GRAFANA_ADMIN_PASSWORD="s3cret-for-test")
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)["services"]["grafana"]["environment"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret-for-test"
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
