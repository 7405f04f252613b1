"""python -m benchmarks [--quick] [--only s1,s2] [--scale N]: run the load-test suite.

Uses DATABASE_URL when set, else starts the embedded Postgres in benchmarks/.work/pgdata.
Writes benchmarks/results/<scenario>.json, summary.md and plot.png (a --quick run writes to
benchmarks/.work/results-quick/ instead, so that a smoke run never replaces the committed
figures). Exit status 0 when every scenario ran (targets met or not), 1 when one failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import asyncpg
from tqdm import tqdm

from benchmarks import report
from benchmarks.common import RESULTS, WORK, Run
from benchmarks.scenarios import ORDER, run_scenario
from dispatcher.store.embedded import start_embedded, stop_embedded


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    parser.add_argument(
        "--only", default="", help=f"comma-separated scenarios, of: {','.join(ORDER)}"
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply full-run sizes by N")
    parser.add_argument(
        "--backlog",
        default=None,
        help="backlog sizes for scenario 7 (default: 10k,1m,10m; quick: 10k,100k)",
    )
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="profile one drain with py-spy into results/profile.md (default: on in full runs)",
    )
    parser.add_argument(
        "--profile-publish",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sample serve with py-spy in scenario publish (flame graphs; default: full runs)",
    )
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--pgdata", type=Path, default=WORK / "pgdata")
    parser.add_argument("--keep-databases", action="store_true", help="do not drop them")
    return parser.parse_args(argv)


async def server_settings(url: str) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        names = (
            "server_version",
            "fsync",
            "synchronous_commit",
            "shared_buffers",
            "wal_level",
            "autovacuum",
            "autovacuum_naptime",
        )
        return {name: await conn.fetchval(f"SHOW {name}") for name in names}
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(ORDER)
    for name in names:
        if name not in ORDER:
            print(f"unknown scenario {name!r}; one of: {', '.join(ORDER)}", file=sys.stderr)
            return 2
    results_dir = args.results_dir or (WORK / "results-quick" if args.quick else RESULTS)
    server = None
    url = os.environ.get("DATABASE_URL", "")
    source = "DATABASE_URL"
    if not url:
        source = "embedded"
        url, server = await asyncio.to_thread(start_embedded, args.pgdata)
    run = Run(
        server_url=url,
        database_source=source,
        quick=args.quick,
        scale=args.scale,
        results_dir=results_dir,
    )
    run.options["keep_databases"] = args.keep_databases
    run.options["backlog"] = args.backlog
    # Scenario `publish` samples serve with py-spy after its measured runs (flame graphs).
    run.options["profile_publish"] = (
        args.profile_publish if args.profile_publish is not None else not args.quick
    )
    failed = []
    # SIGTERM ends the run like Ctrl-C does: through the finally below, which stops every child.
    main_task = asyncio.current_task()
    if main_task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    try:
        run.options.update(await server_settings(url))
        run.log(
            f"database: {source} (Postgres {run.options['server_version']}, "
            f"fsync={run.options['fsync']}, synchronous_commit={run.options['synchronous_commit']}"
            f", autovacuum={run.options['autovacuum']})"
            f"; results: {results_dir}"
        )
        with tqdm(total=len(names), desc="scenarios", unit="scenario", position=0) as bar:
            for name in names:
                bar.set_postfix_str(name)
                if name not in run.results:
                    await run_scenario(run, name)
                if run.results[name].get("error"):
                    failed.append(name)
                bar.update(1)
        profile = args.profile if args.profile is not None else not args.quick
        if profile:
            from benchmarks import profiling

            await profiling.profile_drain(run)
    finally:
        await run.stop_all()
        if server is not None:
            await asyncio.to_thread(stop_embedded, server)
    summary = report.write_summary(results_dir)
    report.write_plot(results_dir)
    if results_dir == RESULTS and not args.quick and not args.only:
        report.update_readme(summary)
    print(summary)
    elapsed = time.time() - run.started
    print(f"\n{len(names)} scenario(s) in {elapsed / 60:.1f} min; results in {results_dir}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cli() -> None:
    args = parse_args()
    import uvloop

    try:
        code = uvloop.run(main(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("benchmarks: interrupted; every child process was stopped", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    cli()
