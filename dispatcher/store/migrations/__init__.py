"""Schema migrations: `NNNN_short_name.sql` takes a database from version NNNN - 1 to NNNN.

A package (not a bare folder) so that the SQL files ship in the wheel as package data and are
found the same way from a checkout and from an install (`importlib.resources`). The runner
and the rules a migration follows are in `dispatcher/store/schema.py`.
"""
