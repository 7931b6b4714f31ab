"""The row types: what the column and query layers know about one database.

One :class:`DialectRow` per database lives in that database's module of this
package (``postgresql``, ``mysql``, ...); :func:`~sqlalchemy_ulid._dialects.dialect_row`
finds it. The fields say what differs; nothing outside this package asks
which database it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from .._convert import ConvertSQL
from .._generator_sql import GeneratorSQL
from ._migration import LockSQL

__all__ = [
    "FUNCTION_NAME",
    "DialectRow",
    "KeySQL",
    "PagingSQL",
    "ServerSQL",
    "SettleSQL",
    "TimeSQL",
]

#: The name of the server-side function on every database.
FUNCTION_NAME = "gen_ulid"


#: One database's server-side ULID generator: DDL and DEFAULT expressions.
ServerSQL = GeneratorSQL


@dataclass(frozen=True)
class KeySQL:
    """One key kind's SQL on one database: a :class:`DialectRow`'s ``keys`` entry."""

    #: the server-side generator: its DDL and DEFAULT expressions (None: none here)
    generator: GeneratorSQL | None = None
    #: the storage conversion SQL (None: not implemented here)
    convert: ConvertSQL | None = None


_NO_KEY_SQL = KeySQL()


@dataclass(frozen=True)
class DialectRow:
    """Everything about one database that ULID support needs to know."""

    #: the storage kind of ``"auto"``/``"native"``
    native: Literal["uuid", "binary"]
    #: the 16-byte binary column type
    binary: Callable[[], TypeEngine[Any]]
    #: renders 16 bytes as a SQL literal of that type
    binary_literal: Callable[[bytes], str]
    #: the ``CHAR(26)`` column type, with a byte-order collation
    text: Callable[[], TypeEngine[Any]]
    #: The drivers take plain ``bytes`` for binary parameters, so the DBAPI
    #: ``Binary()`` wrapper (a copy per value) can be skipped.
    plain_bytes: bool = False
    #: key kind name (``KeyKind.name``: "ulid", "uuid") -> that kind's server
    #: generator and conversion SQL here. A kind with no entry has neither; a
    #: new kind adds an entry, never a field (``KeyKind.generator(row)`` reads it).
    keys: Mapping[str, KeySQL] = field(default_factory=dict)
    #: ``CREATE TABLE ... PARTITION OF ... FOR VALUES FROM ... TO ...`` exists
    range_partitions: bool = False
    #: the creation time of a stored key in SQL (None: not implemented here)
    time: TimeSQL | None = None
    #: The driver can run other statements while a streaming (server-side
    #: cursor) read is open on the same connection (PyMySQL cannot).
    write_while_streaming: bool = True
    #: Uniqueness is added as a unique index: adding a unique constraint
    #: would recreate the table (SQLite), and dropping it offline could not.
    unique_by_index: bool = False
    #: drops a temporary table (``{}``: its quoted name) without committing
    drop_temporary: str = "DROP TABLE IF EXISTS {}"
    #: how keyset pages sort and compare several keys
    paging: PagingSQL = field(default_factory=lambda: PagingSQL())
    #: Reads a native uuid column (``{}``: its SQL) as its 16 bytes in a
    #: SELECT list or RETURNING, so the driver returns ``bytes``, not a
    #: ``uuid.UUID`` to convert again (None: read the uuid as it is).
    native_as_bytes: str | None = None
    #: lock timeouts for DDL (None: the database has no lock waits to bound)
    locks: LockSQL | None = None
    #: ``settle="auto"``'s margin when ``margin=`` is left at its default:
    #: what must cover the time from making an id to its row being where the
    #: horizon looks (measured in benchmarks/bench_mint_gap.py and
    #: bench_follow_soak.py).
    settle_margin: timedelta = timedelta(seconds=1)
    #: the settle horizon's SQL and rules (None: ``settle=`` is not supported here)
    settle: SettleSQL | None = None
    #: one statement reading the server's clock as integer Unix microseconds
    #: when evaluated (None: ``check_clock_skew()`` is not supported here)
    clock_us: str | None = None
    #: the column type of :class:`~sqlalchemy_ulid.UTCDateTime`
    utc_datetime: Callable[[], TypeEngine[Any]] = lambda: sa.DateTime(timezone=True)
    #: the server-side functions live in each connection, registered by
    #: ``register_ulid_function(engine)``, not in the database (SQLite)
    functions_per_connection: bool = False
    #: the row of the connected server's flavour where one dialect name
    #: covers two databases (MariaDB and MySQL both answer to "mysql")
    flavour: Callable[[Dialect], DialectRow] | None = None

    def kind(self, storage: str) -> str:
        """Return the storage kind ("uuid", "binary", "text") of a storage option."""
        return self.native if storage in ("auto", "native") else storage

    def key_sql(self, kind_name: str) -> KeySQL:
        """The SQL of a key kind (by its name) here; an empty :class:`KeySQL` if none.

        Example:
            >>> from sqlalchemy_ulid._dialects import dialect_row
            >>> dialect_row("sqlite").key_sql("ulid").generator.default
            {'binary': 'gen_ulid()'}
            >>> dialect_row("mssql").key_sql("ulid").generator is None
            True
        """
        return self.keys.get(kind_name, _NO_KEY_SQL)


@dataclass(frozen=True)
class PagingSQL:
    """One dialect's facts for keyset pages sorted by several keys."""

    #: NULL sorts after every value in ascending order (None: not known here)
    nulls_largest: bool | None = None
    #: ``ORDER BY ... NULLS FIRST/LAST`` is understood (else emulated)
    nulls_order: bool = True
    #: a row-value comparison ``(a, b) > (:a, :b)`` is an index range scan
    #: (else the planner gets an expanded OR with a leading range conjunct)
    row_values: bool = False
    #: the EXPLAIN prefix whose first row :attr:`estimate` reads (None: none)
    explain: str | None = None
    #: the row estimate from that first row
    estimate: Callable[[Any], int] | None = None
    #: a native ENUM sorts in declaration order but compares as text
    enum_compares_as_text: bool = False
    #: whether a float type, as this dialect renders it in DDL, is single
    #: precision: it comes back rounded, so a cursor could not find its row
    #: again (None: every float this dialect stores is a double)
    single_float: Callable[[str], bool] | None = None
    #: an integer column only holds values of its type's width (SQLite's
    #: INTEGER holds any 64-bit value whatever the declared type)
    int_width_enforced: bool = False
    #: no NaN or infinity can be stored (nor bound: the driver refuses them)
    finite_numbers_only: bool = False
    #: text can hold NUL characters (PostgreSQL's cannot, nor bind one)
    text_holds_nul: bool = True
    #: dates such as '0000-00-00' can be stored (MariaDB/MySQL without
    #: NO_ZERO_DATE, their default); the driver returns them as text
    zero_dates: bool = False
    #: a NaN bound as a parameter arrives as NULL (SQLite)
    nan_is_null: bool = False
    #: the driver returns and binds Decimal values of untyped expressions
    #: (SQLite's returns and binds int, float, str and bytes only)
    untyped_decimals: bool = True
    #: the most significant digits a NUMERIC parameter may have (None: no
    #: limit short of PostgreSQL's own); more fail after SQL
    numeric_digits: int | None = None
    #: a NUMERIC is stored as a double (SQLite's REAL): a NUMERIC key is
    #: read and bound as the double, not rounded to its type's scale
    numeric_as_double: bool = False
    #: dates and times are stored and compared as text (SQLite): a date key
    #: is read and bound as the stored text, not reformatted
    dates_as_text: bool = False
    #: ``EXTRACT(...)`` computes a NUMERIC (PostgreSQL 14 on), not the
    #: integer SQLAlchemy types it as
    extract_numeric: bool = False


_Sql = Callable[[str], str]


@dataclass(frozen=True)
class TimeSQL:
    """One dialect's SQL for the creation time of a stored ULID or UUIDv7.

    ``millis[kind]`` turns a column stored as ``kind`` into its leading 48-bit
    Unix millisecond, an integer; ``timestamp`` turns that integer into the
    dialect's timestamp, in UTC. The kinds: ``"uuid"`` (a native uuid type),
    ``"binary"`` (16 bytes), ``"hex"`` (a UUID's hex text, dashes or not) and
    ``"text"`` (a ULID's 26 characters).
    """

    millis: dict[str, _Sql]
    timestamp: _Sql
    #: kind -> the timestamp straight from the column, where that beats
    #: ``timestamp(millis(col))`` (which reads the millisecond twice)
    direct: dict[str, _Sql] = field(default_factory=dict)
    #: the timestamp type keeps the zone (timestamptz): bind aware datetimes
    #: (else bind the naive UTC wall time)
    zoned: bool = False
    #: the column type of the result, where SQLAlchemy's DateTime would cut
    #: the milliseconds (None: ``sa.DateTime(timezone=True)``)
    datetime_type: Callable[[], TypeEngine[Any]] | None = None
    #: ``sa.Uuid()`` is the database's own uuid type here (else ``CHAR(32)`` hex)
    native_uuid: Callable[[Dialect], bool] = lambda dialect: False
    #: the native uuid type sorts valid UUIDv7 values in time (byte) order
    native_uuid_time_ordered: Callable[[Dialect], bool] = lambda dialect: True
    #: kind -> the timestamp of a column that holds UUIDs (UUIDv7), never
    #: ULIDs, where the server reads it faster than ``direct`` does
    uuid7_direct: dict[str, _Sql] = field(default_factory=dict)
    #: (server version, the SQL from that version on): a newer server's
    #: functions, chosen by :meth:`for_server`
    newer: tuple[tuple[int, ...], TimeSQL] | None = None

    def for_server(self, dialect: Dialect) -> TimeSQL:
        """The SQL for the server the dialect is connected to (this row before a connection).

        Example:
            >>> from sqlalchemy.dialects import postgresql
            >>> from sqlalchemy_ulid._dialects import dialect_row
            >>> dialect = postgresql.dialect()
            >>> time = dialect_row(dialect).time
            >>> time.for_server(dialect) is time
            True
            >>> dialect.server_version_info = (18, 1)
            >>> time.for_server(dialect).uuid7_direct["uuid"]("id")
            'uuid_extract_timestamp(id)'
        """
        version = getattr(dialect, "server_version_info", None) or ()
        row = self
        while row.newer is not None and tuple(version) >= row.newer[0]:
            row = row.newer[1]
        return row


@dataclass(frozen=True)
class SettleSQL:
    """One database's SQL and rules for the settle horizon (``paginate(settle=...)``).

    The horizon statement selects :attr:`now_ms`, then :attr:`isolation`, then
    what ``settle="auto"`` reads. Why each database's way is sound is told
    beside its row (``postgresql.py``, ``mysql.py``); ``_settle.py`` reads them.
    """

    #: the server clock as integer Unix milliseconds, at the statement's start
    now_ms: str
    #: SQL columns: the session's isolation level, whether it autocommits, and
    #: (where :attr:`fresh_levels` is not empty) whether its transaction has
    #: touched a table yet
    isolation: str
    #: levels at which each query sees every row committed before it
    safe_levels: frozenset[str] = frozenset({"read committed"})
    #: levels that are safe too while the transaction has not read yet
    fresh_levels: frozenset[str] = frozenset()
    #: (level, why it is refused) where the general reason would mislead
    refused_why: tuple[tuple[str, str], ...] = ()
    #: how ``settle="auto"`` finds the writers in flight: ``"writers"`` (it
    #: reads which transactions hold a write lock on the table, and since
    #: when: :attr:`writers` is that query) or ``"locking_read"`` (the page
    #: waits for uncommitted rows itself); None: refused, :attr:`auto_refused`
    #: says why
    auto: Literal["writers", "locking_read"] | None = None
    #: why ``settle="auto"`` is refused here (when :attr:`auto` is None)
    auto_refused: str = ""
    #: ``"writers"``: the whole horizon statement (``{now}``, ``{isolation}``;
    #: ``:table`` the quoted table name)
    writers: str = ""
    #: ``"writers"``: reads that statement's row (after the isolation columns)
    #: for the quoted table; returns the oldest writer's start in Unix ms
    #: (None: no writer), or raises SettleError where the table or server
    #: cannot be watched (a view, a standby, a missing privilege...)
    read_writers: Callable[[Sequence[Any], str], int | None] | None = None
    #: ``"writers"``: a statement to run before the horizon statement, in a
    #: statement of its own ("": none)
    writers_prelude: str = ""
    #: ``"locking_read"``: the index hint that makes the page read the
    #: clustered index, and SQL of the table type of ``:schema``.``:name``
    locking_hint: str = ""
    table_type: str = ""
    #: ``"locking_read"``: a server variable that is ON on a node of a
    #: multi-primary cluster, where the locking read cannot see other nodes'
    #: writers (a server without it answers :attr:`unknown_variable`)
    cluster_variable: str = ""
    unknown_variable: object = None
    #: ``"locking_read"``: the error number of a lock wait timeout, which a
    #: follower answers by polling again (None: the page takes no row locks)
    lock_wait_timeout: object = None
