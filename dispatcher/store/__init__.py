"""The only place with SQL or asyncpg: the pool, the embedded server, one module per aggregate."""
