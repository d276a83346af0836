"""The reference platform's state store: sessions and hash-chained turns, with real backup and restore.

SQLite (WAL) by default, PostgreSQL when a DSN is given. Agent replicas use the session and turn
operations; the supervisor uses schema, backup, restore and destroy. Methods are synchronous and
thread-safe (one connection per thread); the async services call them from a thread pool.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import threading
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from glob import glob
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from drillbook.digest import file_sha256
from drillbook.errors import BackupError, StoreUnavailable, StoreUnreachable
from drillbook.sandbox.chain import GENESIS_HASH, turn_hash
from drillbook.sandbox.stream_store import StreamOperations, stream_schema_sql

T = TypeVar("T")


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Session:
    id: str
    tenant: str
    created_at: str


@dataclass(frozen=True)
class Turn:
    """One acknowledged turn of a session, as stored."""

    session_id: str
    seq: int
    idempotency_key: str | None
    input: str
    output: str
    prev_hash: str
    hash: str
    created_at: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ack(turn: Turn, replayed: bool) -> dict[str, Any]:
    """The acknowledgement of a stored turn, as the agent API answers it."""
    return {"session_id": turn.session_id, "seq": turn.seq, "hash": turn.hash, "output": turn.output,
            "idempotency_key": turn.idempotency_key, "replayed": replayed}


@dataclass(frozen=True)
class BackupInfo:
    """A finished backup: where it is, when it was taken, what it holds, and its digest."""

    id: str
    path: str
    created_at: str
    size_bytes: int
    sha256: str
    sessions: int
    turns: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class StateStore(ABC):
    """Sessions and turns with idempotent, transactional, hash-chained appends."""

    kind: str

    def __init__(self, *, idempotency: bool = True) -> None:
        self.idempotency = idempotency
        self._local = threading.local()
        self._open_connections: list[Any] = []
        self._registry_lock = threading.Lock()

    # -- what agent replicas use -------------------------------------------------------------
    @abstractmethod
    def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers and holds its schema."""

    @abstractmethod
    def create_session(self, tenant: str, idempotency_key: str | None = None) -> Session:
        """Open a session. With idempotency on, a key already used by the tenant returns the
        session it opened (a retried open, say after the replica that ran it died, opens nothing
        new); the id is derived from tenant and key, so the store needs no column for it."""

    @abstractmethod
    def get_session(self, session_id: str) -> Session | None: ...

    @abstractmethod
    def turns(self, session_id: str) -> list[Turn]: ...

    @abstractmethod
    def find_turn(self, session_id: str, idempotency_key: str) -> Turn | None: ...

    @abstractmethod
    def append_turn(self, session_id: str, idempotency_key: str | None, text_in: str, text_out: str) -> tuple[Turn, bool]:
        """Append a turn in one transaction; returns (turn, replayed).

        With idempotency on, a key already applied to the session returns the stored turn and
        replayed=True instead of appending again.
        """

    @abstractmethod
    def counts(self) -> tuple[int, int]:
        """(sessions, turns) currently stored."""

    # -- what the supervisor uses ------------------------------------------------------------
    @abstractmethod
    def init_schema(self, reset: bool = False) -> None:
        """Create the tables if they are missing; with reset, drop everything first."""

    @abstractmethod
    def backup(self, directory: Path) -> BackupInfo: ...

    @abstractmethod
    def restore(self, backup_path: Path) -> None: ...

    @abstractmethod
    def destroy(self) -> None:
        """Lose all state, as a disaster would."""

    def _adopt(self, conn: Any) -> Any:
        """Make conn this thread's connection, remembered so that close() can close it."""
        self._local.conn = conn
        with self._registry_lock:
            self._open_connections.append(conn)
        return conn

    def _forget(self) -> None:
        """Close this thread's connection (it is re-opened on next use)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            with self._registry_lock:
                if conn in self._open_connections:
                    self._open_connections.remove(conn)
            conn.close()

    def close(self) -> None:
        """Close every connection any thread opened."""
        self._local.conn = None
        with self._registry_lock:
            connections, self._open_connections = self._open_connections, []
        for conn in connections:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    @staticmethod
    def _new_session_id() -> str:
        return "ses_" + secrets.token_hex(8)

    @staticmethod
    def _keyed_session_id(tenant: str, idempotency_key: str) -> str:
        return "ses_" + hashlib.sha256(f"{tenant}\0{idempotency_key}".encode()).hexdigest()[:16]

    @staticmethod
    def _backup_id() -> str:
        return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(2)

    @staticmethod
    def _publish_backup(directory: Path, backup_id: str, partial: Path, final: Path, sessions: int, turns: int) -> BackupInfo:
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(partial, final)
        info = BackupInfo(backup_id, str(final), utc_now_iso(), final.stat().st_size, file_sha256(final), sessions, turns)
        meta_partial = directory / f".{backup_id}.json.partial"
        meta_partial.write_text(json.dumps(info.to_json(), indent=2))
        os.replace(meta_partial, directory / f"{backup_id}.json")
        return info


def schema_sql(prefix: str) -> list[str]:
    """The tables, with table names under prefix (empty for SQLite, the schema for PostgreSQL)."""
    return [
        f"""CREATE TABLE IF NOT EXISTS {prefix}sessions (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            created_at TEXT NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS {prefix}turns (
            session_id TEXT NOT NULL REFERENCES {prefix}sessions(id),
            seq INTEGER NOT NULL,
            idempotency_key TEXT,
            input TEXT NOT NULL,
            output TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (session_id, seq))""",
        *stream_schema_sql(prefix),
    ]


TURN_COLUMNS = "session_id, seq, idempotency_key, input, output, prev_hash, hash, created_at"


class SqlStore(StreamOperations, StateStore):
    """The session, turn and turn-stream operations, written once for both SQL engines.

    Statements use ``?`` placeholders and ``{t}`` before table names; an engine says how to
    spell both, how to open a connection, and how to open an append transaction that serialises
    appends to one session.
    """

    placeholder = "?"
    table_prefix = ""

    def _sql(self, statement: str) -> str:
        return statement.replace("{t}", self.table_prefix).replace("?", self.placeholder)

    @abstractmethod
    def _conn(self) -> Any: ...

    @abstractmethod
    def _engine_errors(self) -> tuple[type[BaseException], ...]: ...

    @abstractmethod
    def _append_transaction(self, conn: Any, session_id: str) -> AbstractContextManager[None]: ...

    def _run(self, operation: Callable[..., T], *args: Any) -> T:
        try:
            return operation(self._conn(), *args)
        except self._engine_errors() as error:
            self._forget()
            raise StoreUnavailable(f"state store error: {' '.join(str(error).split())}") from None

    def _query(self, conn: Any, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        return list(conn.execute(self._sql(statement), params).fetchall())

    def ping(self) -> None:
        self._run(lambda conn: self._query(conn, "SELECT 1 FROM {t}sessions LIMIT 1"))

    def create_session(self, tenant: str, idempotency_key: str | None = None) -> Session:
        keyed = idempotency_key is not None and self.idempotency
        session = Session(self._keyed_session_id(tenant, idempotency_key) if keyed else self._new_session_id(),
                          tenant, utc_now_iso())
        self._run(lambda conn: conn.execute(self._sql("INSERT INTO {t}sessions (id, tenant, created_at) VALUES (?, ?, ?) "
                                                      "ON CONFLICT (id) DO NOTHING"),
                                            (session.id, session.tenant, session.created_at)))
        if not keyed:
            return session
        stored = self.get_session(session.id)  # the first open's, where this is a retry
        if stored is None:
            raise StoreUnavailable(f"session {session.id} vanished right after it was opened")
        return stored

    def get_session(self, session_id: str) -> Session | None:
        rows = self._run(lambda conn: self._query(conn, "SELECT id, tenant, created_at FROM {t}sessions WHERE id = ?",
                                                  session_id))
        return Session(*rows[0]) if rows else None

    def sessions(self) -> list[Session]:
        """Every session, oldest first (for store-wide checks such as after a restore)."""
        rows = self._run(lambda conn: self._query(conn, "SELECT id, tenant, created_at FROM {t}sessions "
                                                        "ORDER BY created_at, id"))
        return [Session(*row) for row in rows]

    def turns(self, session_id: str) -> list[Turn]:
        rows = self._run(lambda conn: self._query(
            conn, f"SELECT {TURN_COLUMNS} FROM {{t}}turns WHERE session_id = ? ORDER BY seq", session_id))
        return [Turn(*row) for row in rows]

    def _find_turn(self, conn: Any, session_id: str, key: str) -> Turn | None:
        rows = self._query(conn, f"SELECT {TURN_COLUMNS} FROM {{t}}turns WHERE session_id = ? AND idempotency_key = ? "
                                 "ORDER BY seq LIMIT 1", session_id, key)
        return Turn(*rows[0]) if rows else None

    def find_turn(self, session_id: str, idempotency_key: str) -> Turn | None:
        return self._run(self._find_turn, session_id, idempotency_key)

    def append_turn(self, session_id: str, idempotency_key: str | None, text_in: str, text_out: str) -> tuple[Turn, bool]:
        return self._run(self._append_turn, session_id, idempotency_key, text_in, text_out)

    def _append_turn(self, conn: Any, session_id: str, key: str | None, text_in: str, text_out: str) -> tuple[Turn, bool]:
        with self._append_transaction(conn, session_id):
            return self._append_in(conn, session_id, key, text_in, text_out)

    def _append_in(self, conn: Any, session_id: str, key: str | None, text_in: str, text_out: str) -> tuple[Turn, bool]:
        """The append, inside a transaction the caller holds."""
        if self.idempotency and key is not None:
            existing = self._find_turn(conn, session_id, key)
            if existing is not None:
                return existing, True
        last = self._query(conn, "SELECT seq, hash FROM {t}turns WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                           session_id)
        seq, prev_hash = (last[0][0] + 1, last[0][1]) if last else (1, GENESIS_HASH)
        turn = Turn(session_id, seq, key, text_in, text_out, prev_hash,
                    turn_hash(prev_hash, session_id, seq, key, text_in, text_out), utc_now_iso())
        conn.execute(self._sql(f"INSERT INTO {{t}}turns ({TURN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                     tuple(turn.to_json().values()))
        return turn, False

    def counts(self) -> tuple[int, int]:
        def count(conn: Any) -> tuple[int, int]:
            sessions = self._query(conn, "SELECT count(*) FROM {t}sessions")[0][0]
            turns = self._query(conn, "SELECT count(*) FROM {t}turns")[0][0]
            return int(sessions), int(turns)

        return self._run(count)

    def _create_tables(self, conn: Any) -> None:
        for statement in schema_sql(self.table_prefix):
            conn.execute(statement)
        unique = "UNIQUE " if self.idempotency else ""
        conn.execute(self._sql(f"CREATE {unique}INDEX IF NOT EXISTS turns_idempotency "
                               "ON {t}turns (session_id, idempotency_key)"))


class SQLiteStore(SqlStore):
    """SQLite in WAL mode; every agent replica opens the same file.

    A connection is re-opened when the file at the path changes (after a restore), and every
    operation fails with StoreUnavailable while the file is gone (after a destroy).
    """

    kind = "sqlite"

    def __init__(self, path: Path, *, idempotency: bool = True) -> None:
        super().__init__(idempotency=idempotency)
        self.path = Path(path)

    def _engine_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def _conn(self) -> sqlite3.Connection:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._forget()
            raise StoreUnavailable(f"state store {self.path} does not exist") from None
        identity = (st.st_dev, st.st_ino)
        if getattr(self._local, "identity", None) != identity or getattr(self._local, "conn", None) is None:
            self._forget()
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._adopt(conn)
            self._local.identity = identity
        return self._local.conn

    @contextmanager
    def _append_transaction(self, conn: sqlite3.Connection, session_id: str) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")  # one writer at a time across all replicas
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def init_schema(self, reset: bool = False) -> None:
        if reset:
            self.destroy()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            self._create_tables(conn)
        finally:
            conn.close()

    def backup(self, directory: Path) -> BackupInfo:
        directory.mkdir(parents=True, exist_ok=True)
        backup_id = self._backup_id()
        partial = directory / f".{backup_id}.sqlite.partial"
        try:
            target = sqlite3.connect(partial)
            try:
                self._conn().backup(target)
                sessions = target.execute("SELECT count(*) FROM sessions").fetchone()[0]
                turns = target.execute("SELECT count(*) FROM turns").fetchone()[0]
            finally:
                target.close()
        except sqlite3.Error as error:
            partial.unlink(missing_ok=True)
            raise BackupError(f"SQLite backup failed: {error}") from None
        return self._publish_backup(directory, backup_id, partial, directory / f"{backup_id}.sqlite", sessions, turns)

    def restore(self, backup_path: Path) -> None:
        """Copy the backup into the live file with SQLite's backup API (re-created if destroyed)."""
        try:
            source = sqlite3.connect(f"file:{backup_path}?mode=ro", uri=True)
            target = sqlite3.connect(self.path, timeout=30.0)
            try:
                source.backup(target)
                target.execute("PRAGMA journal_mode=WAL")
            finally:
                source.close()
                target.close()
        except sqlite3.Error as error:
            raise BackupError(f"SQLite restore from {backup_path} failed: {error}") from None

    def destroy(self) -> None:
        self.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


PG_SCHEMA = "agent_state"


def pg_tool(name: str) -> str:
    """Path of a PostgreSQL client program, preferring the newest Debian versioned install."""
    def version(path: str) -> int:
        part = Path(path).parts[4]
        return int(part) if part.isdigit() else 0

    versioned = sorted(glob(f"/usr/lib/postgresql/*/bin/{name}"), key=version)
    if versioned:
        return versioned[-1]
    found = shutil.which(name)
    if not found:
        raise BackupError(f"{name} not found: install PostgreSQL's client programs")
    return found


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for messages and evidence."""
    import psycopg.conninfo

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    if "password" in parts:
        parts["password"] = "***"
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in parts.items() if v is not None})


class PostgresStore(SqlStore):
    """PostgreSQL, schema agent_state; backup and restore with pg_dump and pg_restore."""

    kind = "postgres"
    placeholder = "%s"
    table_prefix = f"{PG_SCHEMA}."

    def __init__(self, dsn: str, *, idempotency: bool = True) -> None:
        super().__init__(idempotency=idempotency)
        self.dsn = dsn

    def _engine_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.Error,)

    def _conn(self) -> Any:
        import psycopg

        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            try:
                conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
            except psycopg.Error as error:
                raise StoreUnavailable(f"cannot connect to PostgreSQL at {redact_dsn(self.dsn)}: "
                                       f"{' '.join(str(error).split())}") from None
            self._adopt(conn)
        return conn

    @contextmanager
    def _append_transaction(self, conn: Any, session_id: str) -> Iterator[None]:
        with conn.transaction():
            # Locking the session row serialises appends to one session across replicas.
            conn.execute(self._sql("SELECT id FROM {t}sessions WHERE id = ? FOR UPDATE"), (session_id,))
            yield

    def check_reachable(self) -> None:
        """Raise StoreUnreachable (bad input) when the DSN cannot be connected to."""
        try:
            self._conn()
        except StoreUnavailable as error:
            raise StoreUnreachable(str(error)) from None

    def init_schema(self, reset: bool = False) -> None:
        conn = self._conn()
        with conn.transaction():
            if reset:
                conn.execute(f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE")
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
            self._create_tables(conn)

    def _tool_env_and_dsn(self) -> tuple[dict[str, str], str]:
        """Keep the password out of the command line (and so out of `ps`)."""
        import psycopg.conninfo

        parts = psycopg.conninfo.conninfo_to_dict(self.dsn)
        env = dict(os.environ)
        password = parts.pop("password", None)
        if password:
            env["PGPASSWORD"] = str(password)
        return env, psycopg.conninfo.make_conninfo(**{k: v for k, v in parts.items() if v is not None})

    def _pg(self, argv: list[str], what: str) -> None:
        env, _ = self._tool_env_and_dsn()
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise BackupError(f"{what} failed (exit {result.returncode}): {detail}")

    def backup(self, directory: Path) -> BackupInfo:
        directory.mkdir(parents=True, exist_ok=True)
        backup_id = self._backup_id()
        partial = directory / f".{backup_id}.dump.partial"
        sessions, turns = self.counts()
        _, dsn = self._tool_env_and_dsn()
        try:
            self._pg([pg_tool("pg_dump"), "--format=custom", f"--schema={PG_SCHEMA}", "--no-owner",
                      f"--file={partial}", f"--dbname={dsn}"], "pg_dump")
        except BackupError:
            partial.unlink(missing_ok=True)
            raise
        return self._publish_backup(directory, backup_id, partial, directory / f"{backup_id}.dump", sessions, turns)

    def restore(self, backup_path: Path) -> None:
        self.close()
        _, dsn = self._tool_env_and_dsn()
        self._pg([pg_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--single-transaction",
                  f"--dbname={dsn}", str(backup_path)], "pg_restore")

    def destroy(self) -> None:
        self._conn().execute(f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE")
        self.close()


def open_store(kind: str, *, sqlite_path: Path | None = None, dsn: str | None = None, idempotency: bool = True) -> StateStore:
    """The store a sandbox runtime describes."""
    if kind == "sqlite":
        assert sqlite_path is not None
        return SQLiteStore(sqlite_path, idempotency=idempotency)
    if kind == "postgres":
        assert dsn is not None
        return PostgresStore(dsn, idempotency=idempotency)
    raise ValueError(f"unknown store kind {kind!r}")
