"""A TCP port in front of the real test Postgres, that a test can cut, close and reopen.

The shared test server is never restarted: the code under test is pointed at the forwarder
(its DATABASE_URL names the forwarder's port) and the test makes "Postgres went away" happen
on that path only. `close()` is a server that is down (every connection dropped, new ones
refused), `cut()` a restart as clients see it (connections dropped, new ones accepted), and
`cut_after_commit` drops a connection right after it carried a COMMIT's answer: the first
thing the client sends next (asyncpg's reset when the pool takes the connection back) never
arrives. `lose_answer_to` loses the answer to a write that the server carried out: the first
connection whose client sends the given bytes (a COMMIT, or a statement that commits on its
own) passes them on, then the server's answer up to its CommandComplete and ReadyForQuery is
held and the connection dropped instead (the server has committed; the client never hears
it). The upstream is the server's TCP address, or its unix socket (the embedded pgserver's
default).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

COMMIT_COMPLETE = b"COMMIT\x00"  # the tag of a CommandComplete message for COMMIT
COMMIT = b"COMMIT;\x00"  # the simple query asyncpg sends to commit a transaction
# The end of a statement's execution (CommandComplete, or PortalSuspended when the client asked
# for a row only, as fetchrow does), and the ReadyForQuery that follows it.
COMPLETE, READY_FOR_QUERY = {ord("C"), ord("s")}, ord("Z")


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    committed: bool = False  # a COMMIT's answer went to the client; cut on its next word
    tail: bytes = field(default=b"")
    sent_tail: bytes = field(default=b"")
    statement: bytes | None = None  # the prepared statement that carries `lose_answer_to`
    doomed: bool = False  # its client sent `lose_answer_to`: the answer is to be lost
    completed: bool = False  # a statement's execution ended since (held, never passed)
    held: bytes = field(default=b"")  # the server's bytes not yet passed, while doomed

    def abort(self) -> None:
        for writer in (self.client, self.server):
            writer.transport.abort()


class Forwarder:
    def __init__(self, database_url: str) -> None:
        parts = urlsplit(database_url)
        query = dict(parse_qsl(parts.query))
        host = query.pop("host", None) or parts.hostname or "127.0.0.1"
        port = parts.port or int(query.pop("port", "5432"))
        self._unix = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else None
        self._tcp = (host, port)
        credentials = parts.netloc.rpartition("@")[0]
        self._parts = parts._replace(query=urlencode(query))
        self._credentials = credentials + "@" if credentials else ""
        self.port = 0
        self.cut_after_commit = False
        self.cuts_after_commit = 0
        self.connections = 0  # accepted in all
        self.lose_answer_to: bytes | None = None
        self.down_after_loss = False  # after losing that answer, the server is down too
        self.answers_lost = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._flowing = asyncio.Event()  # cleared: a partition (bytes are held, not passed)
        self._flowing.set()

    @property
    def url(self) -> str:
        """The database's URL through the forwarder (known once it has been opened)."""
        assert self.port, "open the forwarder first"
        netloc = f"{self._credentials}127.0.0.1:{self.port}"
        return urlunsplit(self._parts._replace(netloc=netloc))

    @property
    def live(self) -> int:
        return len(self._links)

    async def open(self) -> None:
        """Listen (again, on the same port once one was given)."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """The server is down: new connections are refused, live ones dropped."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.cut()
        if server is not None:
            await server.wait_closed()

    def cut(self) -> None:
        """Drop every live connection (as a restart does), and keep listening."""
        for link in list(self._links):
            link.abort()
        self._links.clear()

    def stall(self) -> None:
        """A partition: every connection stays open, but no byte passes either way (what
        is sent meanwhile is held, and passed on `resume`, as TCP retransmits it)."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self._unix is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(self._unix)
            else:
                up_reader, up_writer = await asyncio.open_connection(*self._tcp)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._pipe(reader, link, upstream=True),
                self._pipe(up_reader, link, upstream=False),
            )
        finally:
            self._links.discard(link)
            link.abort()

    async def _pipe(self, source: asyncio.StreamReader, link: _Link, *, upstream: bool) -> None:
        target = link.server if upstream else link.client
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await source.read(65536):
                await self._flowing.wait()
                if upstream and link.committed:
                    self.cuts_after_commit += 1
                    break
                if upstream and self.lose_answer_to is not None:
                    self._watch_for_write(link, data)
                if not upstream and link.doomed:
                    if self._lose_answer(link, data):
                        break
                    await target.drain()
                    continue
                if not upstream:
                    if self.cut_after_commit and COMMIT_COMPLETE in link.tail + data:
                        self.cut_after_commit = False  # once
                        link.committed = True
                    link.tail = data[-len(COMMIT_COMPLETE) :]
                target.write(data)
                await target.drain()
        link.abort()  # either side gone: both gone

    def _watch_for_write(self, link: _Link, data: bytes) -> None:
        """Dooms the link once its client sends the write `lose_answer_to` names: at once
        for a simple query (COMMIT), at the statement's execution (its Bind) for one it
        prepares first (asyncpg: Parse with a statement name, then perhaps type look-ups
        of its own on the connection, then Bind and Execute)."""
        marker = self.lose_answer_to
        assert marker is not None
        sent = link.sent_tail + data
        link.sent_tail = data[-1024:]
        if link.statement is None and marker in sent:
            if marker == COMMIT:
                self.lose_answer_to = None  # once
                link.doomed = True
                return
            before = sent[: sent.index(marker)]
            names = re.findall(rb"(__asyncpg_stmt_[0-9a-f_]+__)\x00", before)
            assert names, "the write is sent as a named prepared statement"
            link.statement = names[-1]
        # A Bind to the statement (the unnamed portal): B, its length, "\0", the name, "\0".
        if link.statement and re.search(
            rb"B.{4}\x00" + re.escape(link.statement) + rb"\x00", sent, re.DOTALL
        ):
            self.lose_answer_to = None  # once
            link.doomed = True

    def _lose_answer(self, link: _Link, data: bytes) -> bool:
        """The server's answers on a doomed link, message by message (each a type byte and
        a length): passed on until a statement's execution ends (CommandComplete), then
        held; at the ReadyForQuery that follows (the write is committed by then, a
        statement's implicit transaction too) the connection is dropped. Whether it was."""
        link.held += data
        passed = bytearray()
        while len(link.held) >= 5:
            size = 1 + int.from_bytes(link.held[1:5], "big")
            if len(link.held) < size:
                break
            kind, message = link.held[0], link.held[:size]
            link.held = link.held[size:]
            if kind in COMPLETE:
                link.completed = True
            if link.completed and kind == READY_FOR_QUERY:
                self.answers_lost += 1
                if self.down_after_loss and self._server is not None:
                    self._server.close()  # new connections refused from now on
                    self._server = None
                    self.cut()
                return True
            if not link.completed:
                passed += message
        if passed:
            link.client.write(bytes(passed))
        return False


@contextlib.asynccontextmanager
async def forwarding(database_url: str, *, opened: bool = True) -> AsyncIterator[Forwarder]:
    """A forwarder to `database_url`; with opened=False its port is reserved but closed (a
    server that is not there yet)."""
    forwarder = Forwarder(database_url)
    await forwarder.open()
    if not opened:
        await forwarder.close()
    try:
        yield forwarder
    finally:
        await forwarder.close()
