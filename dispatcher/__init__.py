"""dispatcher: a high-volume webhook dispatcher on Postgres."""

__version__ = "0.1.0"
