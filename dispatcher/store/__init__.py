"""The only place with SQL or asyncpg: the pool, the embedded server, one module per aggregate.

What it hands the layers above are typed rows (rows.py), never asyncpg records, and it takes
their changes by column name (snake_case), never in the API's terms."""
