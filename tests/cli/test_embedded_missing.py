"""Without DATABASE_URL and without the `embedded` extra (pgserver), every command that opens a
database says what to do, in one line, and creates nothing: the image ships without pgserver,
so this is what a container started without DATABASE_URL prints.

pgserver's absence is real: the child process is made unable to import it
(`sys.modules["pgserver"] = None` makes every `import pgserver...` raise ImportError), the
same failure as an environment where it was never installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WITHOUT_PGSERVER = (
    "import sys; sys.modules['pgserver'] = None; from dispatcher.__main__ import main; main()"
)


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--host", "127.0.0.1", "--port", "0"],
        ["worker"],
        ["migrate"],
        ["workspaces", "create", "acme"],
    ],
)
def test_no_database_url_and_no_pgserver_says_what_to_do(
    command: list[str], tmp_path: Path
) -> None:
    pgdata = tmp_path / "pgdata"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    env.pop("DATABASE_URL", None)
    env["DISPATCHER_PGDATA"] = str(pgdata)
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PGSERVER, *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    # No traceback; the last line (serve logs its start and stop before it) names both ways out.
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dispatcher: error: no DATABASE_URL is set"), last
    assert "set DATABASE_URL or install dispatcher[embedded]" in last
    assert not pgdata.exists()


def test_with_pgserver_present_the_same_child_gets_past_the_import(tmp_path: Path) -> None:
    """The control: the same invocation with pgserver importable does not print that error
    (so the test above fails for the reason it names, not for another)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    env.pop("DATABASE_URL", None)
    code = (
        "from dispatcher.store.embedded import start_embedded, stop_embedded; "
        f"url, server = start_embedded({str(tmp_path / 'pgdata')!r}); "
        "print(url.startswith('postgresql://')); stop_embedded(server)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
