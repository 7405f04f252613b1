"""Domain errors. The class docstring is the default message; no HTTP codes here.

The web layer maps each class to a status and an error code; the store translates driver
errors into these at its boundary, so no other layer sees asyncpg exceptions.
"""

from __future__ import annotations


class DispatcherError(Exception):
    """Something went wrong."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self)


class FieldError(DispatcherError):
    """A field of the request is not valid."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class ValidationFailed(DispatcherError):
    """The request is not valid."""

    def __init__(self, errors: list[FieldError], message: str | None = None) -> None:
        super().__init__(message or "; ".join(f"{e.path}: {e.message}" for e in errors))
        self.errors = errors


class NotFound(DispatcherError):
    """The resource does not exist."""


class Conflict(DispatcherError):
    """The request conflicts with the resource's current state."""


class IdempotencyKeyReused(DispatcherError):
    """This Idempotency-Key was already used with another request; send a new key for a new
    request, or the identical request to read the first answer again."""

    def __init__(self, message: str | None = None, *, item: int | None = None) -> None:
        super().__init__(message)
        # The place in a batch of the event whose key it is (None: the request's own key).
        self.item = item


class InvalidCursor(DispatcherError):
    """The cursor is not valid for this list and these filters."""


class Unauthorized(DispatcherError):
    """A valid API key is required: send `Authorization: Bearer <key>`."""


class Forbidden(DispatcherError):
    """The API key lacks the scope this endpoint requires."""


class DatabaseUnavailable(DispatcherError):
    """The database cannot be reached."""

    def __init__(self, message: str | None = None, *, nothing_stored: bool = False) -> None:
        super().__init__(message)
        # Known to have stored nothing of the request's write (its commit was never sent,
        # or was looked for and is not there): the answer can say so.
        self.nothing_stored = nothing_stored


class OutcomeUnknown(DatabaseUnavailable):
    """The connection to the database was lost while this request's change was being
    committed, and the database could not be reached to see whether it was kept: it may have
    been. Retry with the same Idempotency-Key (a write without one: read before writing
    again)."""

    def __init__(self, message: str | None = None, *, backend_pid: int | None = None) -> None:
        super().__init__(message)
        # The server process of the lost connection (None: not known): until it has ended,
        # it may still commit (store/database.py, `Database.settle`).
        self.backend_pid = backend_pid


class ConfigurationError(DispatcherError):
    """A setting is not valid."""


class EmbeddedPostgresMissing(ConfigurationError):
    """No DATABASE_URL is set and the embedded Postgres is not installed: set DATABASE_URL or
    install dispatcher[embedded]."""


class Overloaded(DispatcherError):
    """The service has as much work in progress as it takes; retry shortly."""

    def __init__(self, message: str | None = None, *, reason: str = "requests") -> None:
        super().__init__(message)
        # What was full: "requests" (the requests in progress), "pool" (no database
        # connection came free in time) or "timeout" (a statement ran past its time limit).
        # A metric label: keep the set closed (metrics._declare_label_values).
        self.reason = reason
