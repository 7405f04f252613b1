"""A normalised description of a database's schema, read from the catalog.

From catalog queries rather than pg_dump: the pg_dump on a machine need not match the
server's version. Two databases with the same description have the same tables (with their
columns in order, types, defaults and nullability), constraints, indexes, partitions (bounds
and storage options), functions (full definitions), triggers, views, sequences, types,
policies and extensions.

Names Postgres makes up for the clones of a partitioned table's indexes and constraints on
its partitions depend on the order things were created in; those are described by their
parent's name instead. Dropped columns (which leave a gap in attnum) are left out, column
order is not.
"""

from __future__ import annotations

from typing import Any

import asyncpg

NAMESPACE = "public"

QUERIES: dict[str, str] = {
    "extension": "SELECT extname FROM pg_extension",
    "relation": """
        SELECT c.relname, c.relkind, c.relpersistence, c.relrowsecurity,
               coalesce(array_to_string(c.reloptions, ','), '') AS options,
               coalesce(pg_get_partkeydef(c.oid), '') AS partition_key,
               coalesce(parent.relname, '') AS partition_of,
               coalesce(pg_get_expr(c.relpartbound, c.oid), '') AS bound,
               CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) ELSE '' END AS view
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
        LEFT JOIN pg_class parent ON parent.oid = i.inhparent
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
    """,
    "column": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
               a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '') AS default,
               a.attidentity, a.attgenerated, coalesce(co.collname, '') AS collation,
               -- position among the live columns: order matters, dropped ones' gaps do not
               row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) AS position
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped
    """,
    "constraint": """
        SELECT c.relname, coalesce(parent.conname, con.conname) AS name, con.contype,
               pg_get_constraintdef(con.oid) AS definition, con.condeferrable,
               con.condeferred, con.convalidated
        FROM pg_constraint con
        JOIN pg_class c ON c.oid = con.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_constraint parent ON parent.oid = con.conparentid
        WHERE n.nspname = $1
    """,
    "index": """
        SELECT t.relname AS table, coalesce(parent.relname, i.relname) AS name,
               regexp_replace(pg_get_indexdef(i.oid), ' INDEX \\S+ ON ', ' INDEX ON ')
                   AS definition,
               x.indisvalid, x.indisprimary, x.indisunique
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        JOIN pg_namespace n ON n.oid = t.relnamespace
        LEFT JOIN pg_inherits ih ON ih.inhrelid = i.oid
        LEFT JOIN pg_class parent ON parent.oid = ih.inhparent
        WHERE n.nspname = $1
    """,
    "function": """
        SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS name,
               pg_get_functiondef(p.oid) AS definition
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = $1 AND p.prokind IN ('f', 'p')
    """,
    "trigger": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid) AS definition, t.tgenabled
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND NOT t.tgisinternal
    """,
    "sequence": """
        SELECT c.relname, format_type(s.seqtypid, NULL) AS type, s.seqstart, s.seqincrement,
               s.seqmin, s.seqmax, s.seqcache, s.seqcycle
        FROM pg_sequence s
        JOIN pg_class c ON c.oid = s.seqrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1
    """,
    "type": """
        SELECT t.typname, t.typtype, format_type(t.typbasetype, t.typtypmod) AS base,
               coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                         FROM pg_enum e WHERE e.enumtypid = t.oid), '') AS labels
        FROM pg_type t
        JOIN pg_namespace n ON n.oid = t.typnamespace
        LEFT JOIN pg_class c ON c.oid = t.typrelid
        WHERE n.nspname = $1 AND t.typelem = 0
          AND (t.typtype IN ('e', 'd', 'r', 'm') OR (t.typtype = 'c' AND c.relkind = 'c'))
    """,
    "policy": """
        SELECT c.relname, p.polname, p.polcmd, p.polpermissive,
               coalesce(pg_get_expr(p.polqual, p.polrelid), '') AS using,
               coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '') AS check
        FROM pg_policy p
        JOIN pg_class c ON c.oid = p.polrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1
    """,
}


def _text(value: Any) -> str:
    if isinstance(value, bytes):  # "char" columns (attidentity, ...): NUL means unset
        return value.decode().strip("\x00")
    return str(value)


def _line(kind: str, row: Any) -> str:
    return kind + " " + " | ".join(f"{key}={_text(value)}" for key, value in dict(row).items())


async def describe(url: str) -> list[str]:
    """One line per catalog object, sorted: equal lists mean equal schemas."""
    conn = await asyncpg.connect(url)
    try:
        lines: list[str] = []
        for kind, query in QUERIES.items():
            args = [] if "$1" not in query else [NAMESPACE]
            lines.extend(_line(kind, row) for row in await conn.fetch(query, *args))
        return sorted(lines)
    finally:
        await conn.close()
