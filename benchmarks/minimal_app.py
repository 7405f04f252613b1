"""The API ceiling: a minimal aiohttp application doing what a publish must do at the least.

    python -m benchmarks.minimal_app --port P --database-url URL [--pool-size 10]

Per request: read the body, parse it with orjson, run one `INSERT` through an asyncpg pool (its
own commit: autocommit, fsync and synchronous_commit as the server has them), answer 202 with
the row's id. No authentication, no validation, no logging, no metrics: what is left is the
cost of HTTP, of JSON and of one committed statement, which bounds any API that stores each
request before answering it (scenario `publish` divides dispatcher's rate by this one's,
measured in the same run on the same machine). Loopback only; on uvloop, like `serve`.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import asyncpg
import orjson
from aiohttp import web

TABLE = """
CREATE TABLE IF NOT EXISTS minimal_events (
    id         bigserial PRIMARY KEY,
    type       text NOT NULL,
    data       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
INSERT = "INSERT INTO minimal_events (type, data) VALUES ($1, $2::jsonb) RETURNING id"
POOL = web.AppKey("pool", asyncpg.Pool)


async def publish(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    async with request.app[POOL].acquire() as conn:
        row_id = await conn.fetchval(INSERT, body["type"], orjson.dumps(body["data"]).decode())
    return web.Response(
        body=orjson.dumps({"id": row_id}), status=202, content_type="application/json"
    )


def make_app(url: str, pool_size: int) -> web.Application:
    app = web.Application()

    async def pool_context(app: web.Application) -> AsyncIterator[None]:
        pool = await asyncpg.create_pool(url, min_size=pool_size, max_size=pool_size)
        async with pool.acquire() as conn:
            await conn.execute(TABLE)
        app[POOL] = pool
        yield
        await pool.close()

    app.cleanup_ctx.append(pool_context)
    app.router.add_post("/v1/events", publish)
    app.router.add_get("/readyz", ready)
    return app


async def ready(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.minimal_app", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--pool-size", type=int, default=10)
    args = parser.parse_args()
    import uvloop

    web.run_app(
        make_app(args.database_url, args.pool_size),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
    )


if __name__ == "__main__":
    main()
