"""What ``alter_ulid_storage`` reads of a column before any DDL: type, values, DEFAULT.

Shared by the one-transaction path (``_op``), the online ones (``_online``,
``_shadow``) and the plan (``_plan``): the storage kind a reflected type
holds, the refusal of values that are not ids (naming examples), and the
column's literal DEFAULT carried to the new storage. :func:`read_column`
decides what the one-transaction path has left to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._codec import InvalidULID
from ..._convert_sql import ConvertSQL
from ..._server_defaults import public_name
from ..._types import Storage, ULIDType
from ..._ulid import ULID
from .._inspect import column_state, foreign_keys_on, run

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = [
    "ColumnPlan",
    "check_text",
    "convert_default",
    "define_unhex",
    "kind_of",
    "literal_bytes",
    "read_column",
    "refuse_text_lookalikes",
    "ulid_default",
]


@dataclass
class ColumnPlan:
    """What is left to do, decided from the state found before any DDL."""

    nullable: bool
    #: the column's DEFAULT in the new storage (None: none), and its comment
    default: str | None = None
    comment: str | None = None
    #: the DEFAULT as found (reflected), kept through the holding type
    old_default: str | None = None
    to_holding: bool = True
    update: bool = True
    done: bool = False


def read_column(
    connection: Connection,
    op: AlterULIDStorageOp,
    sql: ConvertSQL,
    from_kind: str,
    to_kind: str,
    table: str,
    column: str,
) -> ColumnPlan:
    """Read the column and its values; decide what is left; refuse what cannot finish."""
    state = column_state(connection, op.table_name, op.column_name, op.schema)
    if state is None:
        raise ValueError(f"{op.table_name} has no column {op.column_name!r}")
    nullable = state.nullable if op.nullable is None else op.nullable
    plan = ColumnPlan(nullable=nullable, comment=state.comment, old_default=state.default)
    holding = None if sql.holding is None else getattr(sql.holding(), "length", None)
    found = op.found_kind(state.type, holding)
    if found == to_kind:
        # Already converted (a rerun after success): nothing to do.
        plan.done = True
        return plan
    if found not in (from_kind, "holding"):
        raise ValueError(
            f"{op.table_name}.{op.column_name} is {state.type}, which is neither "
            f"{from_kind} nor {to_kind} storage: nothing was changed"
        )
    references = foreign_keys_on(connection, op.table_name, op.column_name, op.schema)
    if references:
        raise ValueError(
            f"{op.table_name}.{op.column_name} is used by foreign keys "
            f"({'; '.join(references)}); nothing was changed. Drop those foreign keys, "
            "convert the key and every column referencing it with alter_ulid_storage, "
            "then create the foreign keys again (see 'Keys with foreign keys' in the docs)"
        )
    plan.to_holding = found != "holding" and sql.holding is not None
    if found == "holding" or (sql.holding is None and not sql.alter_using):
        # Non-transactional DDL (MariaDB) or a dynamically typed column
        # (SQLite): an earlier run may have converted the values already. The
        # UPDATE is one statement, so values are all old or all new.
        done_sql = sql.check(column, to_kind) or "TRUE"
        counts = run(
            connection,
            f"SELECT COUNT(CASE WHEN {done_sql} THEN 1 END), COUNT({column}) FROM {table}",
        ).one()
        converted, present = (int(value) for value in counts)
        if converted and converted != present:
            raise ValueError(
                f"{op.table_name}.{op.column_name} holds {converted} converted and "
                f"{present - converted} unconverted values (rows written during an "
                "interrupted conversion?); nothing was changed. Convert or delete the "
                "odd rows by hand, then rerun"
            )
        plan.update = converted == 0 and present > 0
        if converted and op.checked_before(from_kind) and found == "holding":
            refuse_text_lookalikes(connection, op, sql, table, column)
    if plan.update and op.checked_before(from_kind):
        check_text(connection, table, column, sql.bad_text(column, from_kind), op)
    plan.default = convert_default(state.default, op, connection.dialect, sql, to_kind)
    return plan


def kind_of(type_: sa.types.TypeEngine[Any], holding: int | None) -> str | None:
    """Return the storage kind a reflected column type holds, "holding", or None.

    ``holding`` is the length of the dialect's holding type (None: none).
    """
    if isinstance(type_, sa.Uuid):
        return "uuid"
    if isinstance(type_, sa.VARBINARY) and holding is not None and type_.length == holding:
        return "holding"
    if isinstance(type_, sa.types._Binary):
        return "binary"
    if isinstance(type_, sa.String):
        return "text"
    return None


def _sqlite_unhex(text: str) -> bytes:
    return bytes.fromhex(text)


def define_unhex(connection: Connection) -> None:
    """Give an older SQLite connection the ``unhex()`` that 3.41 builds in."""
    import sqlite3

    driver = connection.connection.driver_connection
    # A capability check, not a dialect check: only a sqlite3 connection
    # from a library older than 3.41 lacks it (same meaning as the built-in).
    if isinstance(driver, sqlite3.Connection) and sqlite3.sqlite_version_info < (3, 41):
        driver.create_function("unhex", 1, _sqlite_unhex, deterministic=True)


def refuse_text_lookalikes(
    connection: Connection, op: AlterULIDStorageOp, sql: ConvertSQL, table: str, column: str
) -> None:
    """Refuse text values that look converted in the MariaDB holding type."""
    assert sql.lookalike is not None  # a database with a holding type has one
    lookalike = run(
        connection, f"SELECT COUNT(*) FROM {table} WHERE {sql.lookalike(column)}"
    ).scalar()
    if lookalike:
        raise InvalidULID(
            f"{op.table_name}.{op.column_name} holds {lookalike} 16-character text values "
            f"that are not {op.values_name}; nothing was changed"
        )


_TEXT_LITERAL = re.compile(r"^'([0-9A-Za-z]{26})'(::[a-z ]+)?$")
#: A 16-byte literal DEFAULT as the databases reflect it: a uuid (PostgreSQL
#: casts it, MariaDB's UUID type does not), a PostgreSQL bytea, the unhex()
#: this op gives a MariaDB BINARY(16) column, and SQLite's blob literal.
_BYTES_LITERALS = (
    re.compile(r"^'([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})'(?:::uuid)?$"),
    re.compile(r"^'\\x([0-9a-f]{32})'::bytea$"),
    re.compile(r"^unhex\('([0-9a-fA-F]{32})'\)$", re.IGNORECASE),
    re.compile(r"^[xX]'([0-9a-fA-F]{32})'$"),
)


def literal_bytes(default: str) -> bytes | None:
    """The 16 bytes a reflected literal DEFAULT of a uuid or binary column holds, or None."""
    for pattern in _BYTES_LITERALS:
        match = pattern.match(default)
        if match is not None:
            return bytes.fromhex(match.group(1).replace("-", ""))
    return None


def ulid_default(default: str, kind: str) -> bytes | None:
    """The ULID a literal DEFAULT of a ``kind`` column holds (None: not such a literal)."""
    if kind == "text":
        match = _TEXT_LITERAL.match(default)
        return None if match is None else ULID(match.group(1)).bytes
    return literal_bytes(default)


def convert_default(
    default: str | None, op: AlterULIDStorageOp, dialect: Any, sql: ConvertSQL, to_kind: str
) -> str | None:
    """Return the DEFAULT in the new storage, or refuse one that cannot be converted."""
    if default is None:
        return None
    raw = op.default_value(default, op.kind(op.from_storage, dialect))
    if raw is None:
        raise ValueError(
            f"{op.table_name}.{op.column_name} has DEFAULT {default}, which cannot be carried "
            "to the new storage; nothing was changed. Drop the default, convert, then set a "
            f"new one (for example {public_name(op.keys, '{}_server_default')}())"
        )
    if to_kind == "text":
        return f"'{op.keys.format(raw)}'"
    if to_kind == "hex":
        return f"'{raw.hex()}'"
    if sql.binary_default is not None and to_kind == "binary":
        return sql.binary_default(raw.hex())
    # 16 bytes: ULIDType writes them as the database reads a uuid or binary literal.
    storage: Storage = "binary" if to_kind == "binary" else "native"
    return ULIDType(storage).literal_processor(dialect)(raw)


def check_text(
    connection: Connection,
    table: str,
    column: str,
    bad: str,
    op: AlterULIDStorageOp,
    cause: BaseException | None = None,
) -> None:
    rows = run(
        connection, f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL AND {bad}"
    ).fetchmany(3)
    if rows:
        examples = ", ".join(repr(row[0]) for row in rows)
        raise InvalidULID(
            f"{op.table_name}.{op.column_name} holds values that are not {op.values_name} "
            f"(e.g. {examples}); nothing was changed"
        ) from cause
