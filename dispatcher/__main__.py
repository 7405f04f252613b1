"""The command line: `dispatcher serve | worker | migrate | workspaces | numbers | keys`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import structlog

from dispatcher import __version__, log
from dispatcher.api.admin import MAX_NAME_LENGTH
from dispatcher.api.framework.context import SCOPES
from dispatcher.domain import portal
from dispatcher.domain.clock import isoformat
from dispatcher.domain.phone import is_e164
from dispatcher.domain.poll import key_limit_problem
from dispatcher.domain.portal import Capabilities
from dispatcher.domain.text import name_problem
from dispatcher.errors import DispatcherError
from dispatcher.service import fail, open_database, run, serve, work
from dispatcher.settings import Settings, unknown_variables
from dispatcher.store import portal as portal_sessions
from dispatcher.store import schema, workspaces
from dispatcher.store.database import Database


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dispatcher", description=__doc__)
    parser.add_argument("--version", action="version", version=f"dispatcher {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_cmd = commands.add_parser("serve", help="run the API (and the delivery engine)")
    serve_cmd.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    serve_cmd.add_argument("--port", type=int, default=None, help="port (default 8080)")

    commands.add_parser("worker", help="run the delivery engine alone")
    commands.add_parser("migrate", help="apply pending schema migrations to the database")

    ws = commands.add_parser("workspaces", help="manage workspaces")
    ws_cmds = ws.add_subparsers(dest="action", required=True)
    ws_create = ws_cmds.add_parser("create", help="create a workspace")
    ws_create.add_argument("name")
    ws_create.add_argument("--json", action="store_true", help="print JSON")

    numbers = commands.add_parser("numbers", help="manage phone numbers")
    num_cmds = numbers.add_subparsers(dest="action", required=True)
    num_add = num_cmds.add_parser("add", help="add a number to a workspace")
    num_add.add_argument("workspace_id")
    num_add.add_argument("number", help="E.164, e.g. +15555550100")
    num_add.add_argument("--json", action="store_true", help="print JSON")

    keys = commands.add_parser("keys", help="manage API keys")
    key_cmds = keys.add_subparsers(dest="action", required=True)
    key_create = key_cmds.add_parser("create", help="create an API key (printed once)")
    key_create.add_argument("workspace_id")
    key_create.add_argument(
        "--scope",
        action="append",
        required=True,
        choices=sorted(SCOPES),
        metavar="SCOPE",
        help=f"repeatable; one of: {', '.join(sorted(SCOPES))}",
    )
    key_create.add_argument("--name", default=None, help="what the key is for (optional)")
    key_create.add_argument(
        "--webhook",
        default=None,
        metavar="WEBHOOK_ID",
        help="limit the key's webhooks:poll scope to this webhook (optional)",
    )
    key_create.add_argument("--json", action="store_true", help="print JSON")
    key_revoke = key_cmds.add_parser("revoke", help="revoke an API key")
    key_revoke.add_argument("key_id")
    key_revoke.add_argument("--json", action="store_true", help="print JSON")
    _portal_commands(commands)
    return parser


def _portal_commands(commands: Any) -> None:
    """`dispatcher portal create | delete` (docs/console.md, "Portal sessions")."""
    portal_cmd = commands.add_parser("portal", help="manage portal sessions (console links)")
    portal_cmds = portal_cmd.add_subparsers(dest="action", required=True)
    create = portal_cmds.add_parser("create", help="make a portal link (printed once)")
    create.add_argument("--workspace", required=True, metavar="WORKSPACE_ID")
    create.add_argument("--capabilities", required=True, choices=[str(c) for c in Capabilities])
    create.add_argument(
        "--ttl-seconds",
        type=int,
        default=portal.DEFAULT_TTL_SECONDS,
        help=f"{portal.MIN_TTL_SECONDS}..{portal.MAX_TTL_SECONDS} (default "
        f"{portal.DEFAULT_TTL_SECONDS})",
    )
    create.add_argument("--parent-origin", default=None, help="the one origin that may frame it")
    create.add_argument(
        "--base-url",
        default=None,
        help="the service's address as users reach it (default DISPATCHER_PUBLIC_URL, "
        "else http://DISPATCHER_HOST:DISPATCHER_PORT)",
    )
    create.add_argument("--json", action="store_true", help="print JSON")
    delete = portal_cmds.add_parser("delete", help="end a portal session at once")
    delete.add_argument("--workspace", required=True, metavar="WORKSPACE_ID")
    delete.add_argument("session_id", metavar="PORTAL_SESSION_ID")
    delete.add_argument("--json", action="store_true", help="print JSON")


async def _portal(db: Database, settings: Settings, args: argparse.Namespace) -> None:
    now = datetime.now(UTC)
    if args.action == "create":
        row, secret = await portal_sessions.create(
            db,
            args.workspace,
            Capabilities(args.capabilities),
            args.ttl_seconds,
            args.parent_origin,
            now,
        )
        default = settings.public_url or f"http://{settings.host}:{settings.port}"
        base = (args.base_url or default).rstrip("/")
        url = portal.link(base, row.id, secret)
        expires = isoformat(row.expires_at)
        _emit(
            args.json,
            {"id": row.id, "url": url, "expiresAt": expires},
            f"created portal session {row.id}, until {expires} (shown once): {url}",
        )
    else:
        await portal_sessions.delete(db, args.workspace, args.session_id, now)
        _emit(
            args.json,
            {"id": args.session_id, "deleted": True},
            f"deleted portal session {args.session_id}",
        )


def _portal_problem(args: argparse.Namespace) -> str | None:
    """Why `portal create`'s arguments break the API's rules (domain/portal.py), or None."""
    if args.command != "portal" or args.action != "create":
        return None
    if not portal.MIN_TTL_SECONDS <= args.ttl_seconds <= portal.MAX_TTL_SECONDS:
        return f"--ttl-seconds must be {portal.MIN_TTL_SECONDS}..{portal.MAX_TTL_SECONDS}"
    if args.parent_origin is not None:
        problem = portal.origin_problem(args.parent_origin)
        if problem is not None:
            return f"--parent-origin {problem}"
    return None


def _emit(as_json: bool, obj: dict[str, Any], line: str) -> None:
    print(orjson.dumps(obj).decode() if as_json else line, flush=True)


async def _admin(settings: Settings, args: argparse.Namespace) -> None:
    async with open_database(settings, migrate=args.command != "migrate") as db:
        if args.command == "migrate":
            done = await schema.upgrade(db)
            for name in done.applied:
                print(f"applied {name}", flush=True)
            print(f"schema at version {done.after}", flush=True)
        elif args.command == "workspaces":
            workspace_id = await workspaces.create_workspace(db, args.name)
            _emit(args.json, {"id": workspace_id}, f"created workspace {workspace_id}")
        elif args.command == "numbers":
            number_id = await workspaces.add_number(db, args.workspace_id, args.number)
            _emit(args.json, {"id": number_id}, f"added number {args.number} as {number_id}")
        elif args.command == "keys" and args.action == "create":
            row, key = await workspaces.insert_key(
                db, args.workspace_id, args.scope, args.name or None, args.webhook
            )
            key_id = row.id
            _emit(
                args.json,
                {"id": key_id, "key": key},
                f"created key {key_id} (shown once, store it now): {key}",
            )
        elif args.command == "portal":
            await _portal(db, settings, args)
        elif args.command == "keys" and args.action == "revoke":
            await workspaces.revoke_key(db, args.key_id)
            _emit(args.json, {"id": args.key_id, "revoked": True}, f"revoked key {args.key_id}")


def _names(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The names the command was given, to be held to the API's rules (domain/text.py)."""
    if args.command == "workspaces":
        return [("workspace", args.name)]
    if args.command == "keys" and args.action == "create" and args.name:
        return [("key", args.name)]
    return []


def warn_unknown_variables() -> None:
    """A DISPATCHER_* variable no setting reads is most likely a typo, whose setting is then
    silently left at its default: say so at start-up, naming it and the closest known name."""
    for name, closest in unknown_variables():
        structlog.get_logger("dispatcher").warning(
            "settings.unknown_variable",
            variable=name,
            did_you_mean=closest,
            message=f"{name} is not a setting and is ignored"
            + (f"; did you mean {closest}?" if closest else " (see docs/configuration.md)"),
        )


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except DispatcherError as exc:
        fail(str(exc), 2)
        return
    if args.command == "numbers" and not is_e164(args.number):
        fail(f"{args.number!r} is not an E.164 number (like +15555550100)", 2)
    portal_problem = _portal_problem(args)
    if portal_problem is not None:
        fail(portal_problem, 2)
    for what, name in _names(args):
        problem = name_problem(name, MAX_NAME_LENGTH)
        if problem is not None:
            fail(f"the {what} name {problem}", 2)
    if args.command == "keys" and args.action == "create":
        problem = key_limit_problem(args.scope, args.webhook)
        if problem is not None:
            fail(f"--webhook {problem}", 2)
    log.configure(settings.log_format, settings.log_level)
    warn_unknown_variables()
    try:
        if args.command == "serve":
            host = args.host or settings.host
            port = settings.port if args.port is None else args.port
            run(serve(settings, host, port))
        elif args.command == "worker":
            run(work(settings))
        else:
            run(_admin(settings, args))
    except DispatcherError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
