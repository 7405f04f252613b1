"""Every SQL statement the store sends, by name: one `.sql` file per area, in this folder.

A file holds its area's statements, each whole, under a header that names it and a comment that
says what it does (procrastinate's `queries.sql`, river's query files). Parameters are named,
`@name` (river's and sqlc's style)::

    -- name: find_idempotent_event
    -- The payload and fingerprint of the latest event published under a key, in the window.
    SELECT payload, request_fingerprint FROM events
    WHERE workspace_id = @workspace_id AND idempotency_key = @key AND created_at > @since
    ORDER BY created_at DESC LIMIT 1

A store module binds its file by declaring the statements it sends, and sends them by name,
with the values by name::

    class SQL(Queries, file="events.sql"):
        find_idempotent_event: Statement

    await conn.fetchrow(*SQL.find_idempotent_event(workspace_id=ws, key=key, since=since))

The loader translates the names once, when the file is read, to asyncpg's `$1, $2, ...` (a
name used twice is one parameter); calling a statement checks the values against its names
(one missing, or one it does not name, raises `TypeError`) and gives `(sql, *values)`, in the
order the database numbers them. `Statement.many` does the same for `executemany`.

The file is read and parsed once, when the class is defined, that is at import: a statement the
class declares that the file lacks, or one the file holds that the class does not declare (dead
SQL), fails the import, never a call; a misspelt attribute fails mypy. Each file is bound by
exactly one class.

Two places still add to a statement in Python, each for what a parameter cannot be: a list's
`..._page` statement gets its optional filters, its keyset position, order and limit from
store/pages.py (which filters a request gives decides the index walk: written as `@x IS NULL OR
...` they would leave the generic plan without an index condition), and maintenance.sql's
`{day}` names a day's partitions (an identifier).

No statement numbers its parameters itself (`$1`): the loader refuses one that does, and a
class that declares a statement anything but `Statement`. webhooks.sql's endpoint statements
get the endpoint's one column list written in at import (store/webhooks.py `with_options`,
its option parameters named after the options), then are translated as the file's are.

What the database itself runs (the outbox function users call, the fan-out, the envelope,
triggers) lives in dispatcher/store/functions.sql; these statements call it by name. The folder
ships in the wheel as package data (pyproject.toml), read with importlib.resources like the
migrations.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

HEADER = re.compile(r"^-- name: *(\S*)[ \t]*$", re.MULTILINE)
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# What a parameter may hide in: string literals, quoted names, comments, dollar quotes and
# casts are passed over; `@name` is a named parameter, `$n` a numbered one (refused). `@`
# after `<` or `@` is an operator (`<@`, `@@`), and `@>` never starts a name.
TOKEN = re.compile(
    r"""'(?:[^']|'')*'|"[^"]*"|--[^\n]*|/\*.*?\*/|\$([A-Za-z_]\w*|)\$.*?\$\1\$|::"""
    r"""|(?<![<@\w])@([a-z_][a-z0-9_]*)|\$(\d+)""",
    re.DOTALL,
)

# Which class binds each file (one per file).
_BOUND: dict[str, str] = {}


class QueryFileError(Exception):
    """A query file that cannot be trusted: a statement without a name or a description, a
    name twice, a statement numbering its parameters (`$n`), or a file and the class that
    binds it that disagree. A programming error, raised at import."""


@dataclass(frozen=True)
class Bound:
    """A statement with its values, in the database's order: `conn.fetch(*bound)`."""

    sql: str
    args: tuple[Any, ...]

    def __iter__(self) -> Iterator[Any]:
        yield self.sql
        yield from self.args


@dataclass(frozen=True)
class Statement:
    """One named statement: `sql` numbers its parameters as asyncpg does, `params` names them
    in that order."""

    name: str
    sql: str
    params: tuple[str, ...]

    def values(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values in `$n` order; a name missing or one the statement lacks raises."""
        missing = [name for name in self.params if name not in values]
        unknown = sorted(set(values) - set(self.params))
        if missing or unknown:
            takes = ", ".join(self.params) or "no parameters"
            raise TypeError(
                f"statement {self.name} takes {takes}: missing {', '.join(missing) or '(none)'}; "
                f"unknown {', '.join(unknown) or '(none)'}"
            )
        return tuple(values[name] for name in self.params)

    def __call__(self, **values: Any) -> Bound:
        return Bound(self.sql, self.values(values))

    def many(self, rows: Iterable[Mapping[str, Any]]) -> tuple[str, list[tuple[Any, ...]]]:
        """`(sql, [values, ...])` for `executemany`."""
        return self.sql, [self.values(row) for row in rows]


@dataclass(frozen=True)
class Query:
    name: str
    description: str  # the comment under the name, joined into one line
    sql: str  # as sent: named parameters translated to `$n`
    params: tuple[str, ...] = ()  # the names of $1, $2, ...
    text: str = ""  # as written in the file

    @property
    def statement(self) -> Statement:
        return Statement(self.name, self.sql, self.params)


def translate(sql: str, where: str = "<text>") -> tuple[str, tuple[str, ...]]:
    """`sql` with each `@name` replaced by `$n` (the same name, the same number), and the
    names in number order; a statement numbering parameters itself (`$n`) is refused."""
    params: list[str] = []

    def replace(match: re.Match[str]) -> str:
        if match.group(3) is not None:
            raise QueryFileError(
                f"{where}: numbers its parameters ({match.group(0)}): name them (@name)"
            )
        name = match.group(2)
        if name is None:
            return match.group(0)
        if name not in params:
            params.append(name)
        return f"${params.index(name) + 1}"

    return TOKEN.sub(replace, sql), tuple(params)


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
        comment = list(itertools.takewhile(lambda line: line.startswith("--"), lines))
        description = " ".join(line.removeprefix("--").strip() for line in comment).strip()
        sql = "\n".join(lines[len(comment) :]).strip()
        if not description:
            raise QueryFileError(f"{file}: {name} has no description (a `-- ...` line under it)")
        if not sql:
            raise QueryFileError(f"{file}: {name} has no statement")
        translated, params = translate(sql, f"{file}: {name}")
        queries[name] = Query(name, description, translated, params, sql)
    return queries


@functools.cache
def load(file: str) -> dict[str, Query]:
    """The statements of one file of this folder, read once."""
    return parse(resources.files(__name__).joinpath(file).read_text(), file)


class Queries:
    """The statements of one query file, as class attributes (see the module's docstring).

    A subclass passes `file=` and declares each statement it sends as `name: Statement`."""

    file: ClassVar[str]

    def __init_subclass__(cls, *, file: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = load(file)
        # This class's own annotations (not a base's): the statements it sends.
        annotations = inspect.get_annotations(cls)
        declared = list(annotations)
        missing = [name for name in declared if name not in found]
        unused = [name for name in found if name not in declared]
        if missing or unused:
            raise QueryFileError(
                f"{file} and {cls.__module__}.{cls.__qualname__} disagree: "
                f"declared but not in the file: {', '.join(missing) or '(none)'}; "
                f"in the file but not declared: {', '.join(unused) or '(none)'}"
            )
        if file in _BOUND:
            raise QueryFileError(f"{file} is bound by {_BOUND[file]} already")
        other = [name for name in declared if annotations[name] not in (Statement, "Statement")]
        if other:
            raise QueryFileError(f"{file}: declare {', '.join(other)} `Statement`")
        _BOUND[file] = f"{cls.__module__}.{cls.__qualname__}"
        cls.file = file
        for name in declared:
            setattr(cls, name, found[name].statement)


def bound_files() -> dict[str, str]:
    """Each query file bound so far, with the class that binds it."""
    return dict(_BOUND)
