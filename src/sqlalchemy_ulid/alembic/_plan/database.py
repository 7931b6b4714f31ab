"""The per-database half of the engine, registered by dialect name.

As Alembic registers its ``DefaultImpl`` subclasses by ``__dialect__``, each
database module (``alembic/postgresql``, ``alembic/mysql``, ``alembic/sqlite``)
defines one :class:`Database` subclass naming the dialects it serves, and
registers it when imported (``sqlalchemy_ulid.alembic`` imports them);
:func:`database_for` finds it. Nothing else in the engine asks which database it runs on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from ..._dialects import LockSQL
from .._inspect import quote
from .._locks import Blocker, _read_blockers, _watching
from .state import STATE_TABLE, StateSQL

if TYPE_CHECKING:
    from .step import Plan, Step

__all__ = ["DDLFrame", "Database", "FillRows", "UnsupportedDatabase", "database_for"]

#: A key type whose values cannot go back to the server as they were read.
_UNWALKABLE = (
    "a primary key of type {name} cannot be sent back as the values read from it, "
    "so the backfill could not find its rows again by their key"
)


class DDLFrame(NamedTuple):
    """The statements around a DDL step's own (online), for its lock timeout."""

    #: before the step's statements (PostgreSQL: BEGIN, SET LOCAL lock_timeout)
    begin: list[str]
    #: each statement as sent (MariaDB: SET STATEMENT ... FOR it)
    wrap: Callable[[str], str]
    #: after them, the state row written in between (PostgreSQL: COMMIT)
    end: list[str]
    #: after a failure, once ``begin`` ran (PostgreSQL: ROLLBACK)
    abort: list[str]


class FillRows(NamedTuple):
    """One batch of an online backfill: the ids its rows get, written by one statement."""

    #: the table, key and column, quoted (``%`` not escaped)
    table: str
    key: str
    column: str
    #: the key's and the column's types (as compiled for the database)
    key_type: Any
    id_type: Any
    #: the batch's keys in key order, as read, and each one's id, bound
    keys: list[Any]
    ids: list[Any]
    #: the time column (quoted), its type, and each row's time as read: a
    #: row whose time changed since is left for a later pass
    time: str
    time_type: Any
    times: list[Any]


_REGISTRY: dict[str, type[Database]] = {}


class UnsupportedDatabase(ValueError):
    """The op has no planner for this database."""


class Database:
    """A database's planners, its state table SQL and the errors the runner reads."""

    #: the dialect names this class serves
    __dialect__: ClassVar[tuple[str, ...]] = ()
    #: the state table's SQL
    state: ClassVar[StateSQL]
    #: error codes of a statement that failed on rows written meanwhile (a
    #: NOT NULL or CHECK that a new row without the value broke)
    late_row_codes: ClassVar[frozenset[object]] = frozenset()
    #: the session id, lock-timeout errors and blockers query
    locks: ClassVar[LockSQL]
    #: the key conversion's swap guards (the database's ``catalog.KeyCatalog``)
    key_catalog: ClassVar[Any] = None
    #: storage kinds whose ids the scripts make in SQL (empty: no script)
    script_kinds: ClassVar[tuple[str, ...]] = ()
    #: rows a script's batch may take at most, by key kind (the tie counter's range)
    script_max_batch: ClassVar[dict[str, int]] = {"ulid": 65_535, "uuid7": 4_095}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.__dialect__:
            _REGISTRY[name] = cls

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def refuse_online(self, op_name: str) -> None:
        """Raise :class:`UnsupportedDatabase` where online ops make no sense."""

    def add_column(self, op: Any, facts: Any) -> Plan:
        """The plan of ``add_ulid_column``/``add_uuid7_column(online=True)``."""
        raise UnsupportedDatabase(f"{op.op_name}(online=True) is not supported on {self.name}")

    def alter_storage(self, target: Any, copy: Any) -> Plan:
        """The plan of ``alter_ulid_storage``/``alter_uuid7_storage(online=True)``."""
        raise UnsupportedDatabase(f"{target.op}(online=True) has no plan on {self.name}")

    def storage_script(self, target: Any) -> str | None:
        """The ``--sql`` script of the one-transaction storage op (None: Alembic's own)."""
        return None

    def storage_checks(self, target: Any) -> list[Step]:
        """The refusals the one-transaction storage op asks online first (its script too)."""
        return []

    def fill_batch(self, connection: Connection, rows: FillRows) -> int:
        """Give a backfill batch's rows still without an id theirs; return how many."""
        raise NotImplementedError

    def fill_key_refusal(self, key_type: Any) -> str | None:
        """Why the online backfill cannot walk a primary key of ``key_type`` (None: it can).

        The backfill reads each batch's keys into Python and finds the rows
        again by them (``key = value``, ``key > last``): a single-precision
        float reads back rounded (``0.1`` for ``0.100000001...``), matches no
        row, and the walk would read the same rows for ever. A JSON, array
        or boolean key does not go back as the value it was read as, and a
        type SQLAlchemy does not know cannot be named in the batch's SQL.
        """
        name = key_type.__class__.__name__
        if isinstance(key_type, sa.Float) and not isinstance(key_type, sa.Double):
            return (
                f"a single-precision floating-point primary key ({name}) reads back "
                "rounded, so its rows cannot be found again by their key"
            )
        if isinstance(key_type, (sa.types.Indexable, sa.Boolean, sa.types.NullType)):
            return _UNWALKABLE.format(name=name)
        return None

    def render(self, plan: Plan) -> str:
        """The plan as a script for the database's client."""
        raise UnsupportedDatabase(f"no offline script on {self.name}")

    def primary_key_script(
        self, operations: Any, op: Any, direction: Literal["ulid", "legacy"], name: str
    ) -> None:
        """Write the key conversion's (``op``, ``name``) offline script into ``--sql``."""
        raise UnsupportedDatabase(
            f"{name} writes an offline (--sql) script for PostgreSQL and MariaDB/MySQL "
            f"only, not {self.name}"
        )

    @property
    def name(self) -> str:
        """The dialect's name, in messages."""
        return str(self.dialect.name)

    def quote_table(self, schema: str | None) -> str:
        """The state table's quoted, qualified name."""
        return quote(self.dialect, STATE_TABLE, schema)

    def ddl_frame(self, seconds: float) -> DDLFrame:
        """How a DDL step's statements are framed so that each waits ``seconds`` at most."""
        raise NotImplementedError

    def run_concurrent(self, connection: Connection, statement: str, seconds: float) -> None:
        """Run a statement that must not be in a transaction."""
        raise NotImplementedError

    def unbounded_frame(self) -> DDLFrame:
        """How the runner's other statements run without the session's statement timeout.

        A role's or database's statement timeout (PostgreSQL
        ``statement_timeout``) would cancel a whole-table check or a batch
        on a big table. The frame opens a transaction that turns it off
        until its end (PostgreSQL: ``BEGIN; SET LOCAL statement_timeout =
        0``), so nothing stays on the session, through a pooler too. Empty
        here: the database has no such timeout, or the op's session
        (``Catalog.plain_session``) already runs without it.
        """
        return DDLFrame([], lambda statement: statement, [], [])

    def watching(
        self, connection: Connection, pid: list[int], seconds: float, found: dict[int, Blocker]
    ) -> contextlib.AbstractContextManager[None]:
        """Note, from a second connection, who blocks session ``pid[0]`` meanwhile."""
        return _watching(connection, self.locks, pid, seconds, found)

    def read_blockers(self, connection: Connection, pid: int, found: dict[int, Blocker]) -> None:
        """Add the sessions blocking ``pid`` now to ``found``."""
        _read_blockers(connection, self.locks, pid, found)


def database_for(dialect: Dialect) -> Database:
    """The registered :class:`Database` of ``dialect``, or :class:`UnsupportedDatabase`."""
    cls = _REGISTRY.get(dialect.name)
    if cls is None:
        raise UnsupportedDatabase(f"{dialect.name} has no migration planner")
    return cls(dialect)
