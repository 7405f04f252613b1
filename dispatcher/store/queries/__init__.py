"""Every SQL statement the store sends, by name: one `.sql` file per area, in this folder.

A file holds its area's statements, each under a header that names it and a comment that says
what it does (procrastinate's `queries.sql`, river's query files)::

    -- name: find_idempotent_event
    -- The payload and fingerprint of the latest event published under a key, in the window.
    SELECT payload, request_fingerprint FROM events
    WHERE workspace_id = $1 AND idempotency_key = $2 AND created_at > $3
    ORDER BY created_at DESC LIMIT 1

A store module binds its file by declaring the statements it sends, and sends them by name::

    class SQL(Queries, file="events.sql"):
        find_idempotent_event: str

    await conn.fetchrow(SQL.find_idempotent_event, workspace_id, key, since)

The file is read and parsed once, when the class is defined, that is at import: a statement the
class declares that the file lacks, or one the file holds that the class does not declare (dead
SQL), fails the import, never a call; a misspelt attribute fails mypy. Each file is bound by
exactly one class.

Steps that several statements share are written once, as a named part, and each statement
stands for it with a line `-- include: part_name` (the claim's three variants share all but
their walk). A part is expanded where it is included, when the file is read; it is no statement
of its own, so no class declares it. A part may include parts in turn (the claim's last steps
include the reason a row is given up, which the record shares), never itself.

What the database itself runs (the outbox function users call, the fan-out, the envelope,
triggers) lives in schema.sql; these statements call it by name. The folder ships in the wheel
as package data (pyproject.toml), read with importlib.resources like the migrations.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

HEADER = re.compile(r"^-- name: *(\S*)[ \t]*$", re.MULTILINE)
# A line of a statement that stands for a part written once in the same file (see `parse`).
INCLUDE = re.compile(r"^-- include: *(\S+)[ \t]*$", re.MULTILINE)
NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# Which class binds each file (one per file).
_BOUND: dict[str, str] = {}


class QueryFileError(Exception):
    """A query file that cannot be trusted: a statement without a name or a description, a
    name twice, or a file and the class that binds it that disagree. A programming error,
    raised at import."""


@dataclass(frozen=True)
class Query:
    name: str
    description: str  # the comment under the name, joined into one line
    sql: str
    part: bool = False  # included by another block: a piece of statements, never sent alone


def parse(text: str, file: str = "<text>") -> dict[str, Query]:
    """The statements of a query file by name, in file order. Text before the first header is
    the file's own comment."""
    parts = HEADER.split(text)
    queries: dict[str, Query] = {}
    for name, block in zip(parts[1::2], parts[2::2], strict=True):
        if not NAME.match(name):
            raise QueryFileError(f"{file}: {name!r} is not a statement name (a-z, 0-9, _)")
        if name in queries:
            raise QueryFileError(f"{file}: {name} is named twice")
        lines = block.strip("\n").splitlines()
        comment = list(
            itertools.takewhile(
                lambda line: line.startswith("--") and not INCLUDE.match(line), lines
            )
        )
        description = " ".join(line.removeprefix("--").strip() for line in comment).strip()
        sql = "\n".join(lines[len(comment) :]).strip()
        if not description:
            raise QueryFileError(f"{file}: {name} has no description (a `-- ...` line under it)")
        if not sql:
            raise QueryFileError(f"{file}: {name} has no statement")
        queries[name] = Query(name, description, sql)
    return _with_parts(queries, file)


def _with_parts(queries: dict[str, Query], file: str) -> dict[str, Query]:
    """Each `-- include: part` line replaced by that block's statement text, its own includes
    expanded: steps several statements share (the claim's variants) are written once. A block
    that is included is a part: no class declares it, and it is never sent alone."""
    included = {part for query in queries.values() for part in INCLUDE.findall(query.sql)}
    unknown = sorted(included - queries.keys())
    if unknown:
        raise QueryFileError(f"{file}: includes {', '.join(unknown)}, which it does not name")

    def expand(name: str, within: tuple[str, ...]) -> str:
        if name in within:
            cycle = " -> ".join((*within, name))
            raise QueryFileError(f"{file}: {cycle}: a part includes itself")
        return INCLUDE.sub(lambda match: expand(match.group(1), (*within, name)), queries[name].sql)

    return {
        name: Query(name, query.description, expand(name, ()), name in included)
        for name, query in queries.items()
    }


@functools.cache
def load(file: str) -> dict[str, Query]:
    """The statements of one file of this folder, read once."""
    return parse(resources.files(__name__).joinpath(file).read_text(), file)


class Queries:
    """The statements of one query file, as class attributes (see the module's docstring).

    A subclass passes `file=` and declares each statement it sends as `name: str`."""

    file: ClassVar[str]

    def __init_subclass__(cls, *, file: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = load(file)
        # This class's own annotations (not a base's): the statements it sends.
        declared = list(inspect.get_annotations(cls))
        missing = [name for name in declared if name not in found or found[name].part]
        unused = [name for name in found if name not in declared and not found[name].part]
        if missing or unused:
            raise QueryFileError(
                f"{file} and {cls.__module__}.{cls.__qualname__} disagree: "
                f"declared but not in the file: {', '.join(missing) or '(none)'}; "
                f"in the file but not declared: {', '.join(unused) or '(none)'}"
            )
        if file in _BOUND:
            raise QueryFileError(f"{file} is bound by {_BOUND[file]} already")
        _BOUND[file] = f"{cls.__module__}.{cls.__qualname__}"
        cls.file = file
        for name in declared:
            setattr(cls, name, found[name].sql)


def bound_files() -> dict[str, str]:
    """Each query file bound so far, with the class that binds it."""
    return dict(_BOUND)
