"""How the tests themselves are laid out.

A test module imports no other test module: what two of them share lives in a module that is
not collected (tests/processes.py, tests/engine/helpers.py, a conftest.py for fixtures). Else
running one file runs, or breaks with, another's set-up, and moving a test moves its users'
helpers."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def is_test_module(dotted: str) -> bool:
    """A collected module of this suite (not a library's, such as aiohttp.test_utils)."""
    return dotted.startswith("tests.") and dotted.rsplit(".", 1)[-1].startswith("test_")


def package_of(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).parts[:-1])


def imported_test_modules(source: str, package: str) -> list[str]:
    """The test modules `source` (a module of `package`) imports, anywhere in it (a function's
    own imports too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this file's package
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            if is_test_module(base):
                found.append(base)
            # `from tests.e2e import test_process`
            found += [f"{base}.{a.name}" for a in node.names if is_test_module(f"{base}.{a.name}")]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS.parent)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := imported_test_modules(path.read_text(), package_of(path)))
    }
    assert offenders == {}, "move what they share to a module that is not a test_*.py"


def test_the_check_sees_every_form_of_import() -> None:
    """Each form a test module can be imported by is caught (so the check above can fail):
    absolute, from its package, relative, and inside a function."""
    sources = {
        "from tests.e2e.test_process import STARTED": ["tests.e2e.test_process"],
        "import tests.e2e.test_process": ["tests.e2e.test_process"],
        "from tests.e2e import test_process": ["tests.e2e.test_process"],
        "from .test_process import STARTED": ["tests.e2e.test_process"],
        "from . import test_process": ["tests.e2e.test_process"],
        "from ..api.test_admin import x": ["tests.api.test_admin"],
        "def f():\n    from tests.cli.test_cli import cli": ["tests.cli.test_cli"],
        "from tests.processes import start": [],
        "from tests.conftest import wait_for": [],
        "from aiohttp.test_utils import TestClient": [],
    }
    for source, expected in sources.items():
        assert imported_test_modules(source, "tests.e2e") == expected, source
