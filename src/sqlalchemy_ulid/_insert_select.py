"""``INSERT ... SELECT`` with one new key per row, made by the database.

SQLAlchemy evaluates a Python column default (``default=new_ulid``, the
mixins' key) once per statement, so ``insert().from_select()`` gives every
selected row the same id. :func:`insert_from_select` puts the database's own
generator in the SELECT instead: one call per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import Insert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Select

from ._errors import InvalidInput
from ._keys import keys_of
from ._kinds import KeyKind
from ._server_defaults import server_default

__all__ = ["insert_from_select"]


def _table_of(target: Any) -> sa.Table:
    table = getattr(target, "__table__", target)  # an ORM class: its table
    if not isinstance(table, sa.Table):
        raise InvalidInput(f"insert_from_select() needs a Table or a mapped class, got {target!r}")
    return table


def _key_of(table: sa.Table, key: str | sa.Column[Any] | None) -> sa.Column[Any]:
    if key is None:
        primary = list(table.primary_key.columns)
        if len(primary) != 1:
            raise InvalidInput(
                f"table {table.name!r} has {len(primary)} primary-key columns: "
                "pass key= the column to fill"
            )
        return primary[0]
    name = key if isinstance(key, str) else key.name
    if name not in table.c:
        raise InvalidInput(f"table {table.name!r} has no column {name!r}")
    return table.c[name]


def _generator(column: sa.Column[Any]) -> ColumnElement[Any]:
    """The server-side generator call of the column's key kind and storage."""
    kind: KeyKind = keys_of(column).key_kind
    storage = kind.default_storage(column.type)
    if storage == "text":
        raise InvalidInput(
            f"column {column.name!r} stores ULIDs as text, which no database generates: "
            "make the ids in Python and insert the rows as a list"
        )
    return server_default(kind, storage)


def insert_from_select(
    table: Any,
    names: Sequence[str | sa.Column[Any]],
    select: Select[Any],
    *,
    key: str | sa.Column[Any] | None = None,
    include_defaults: bool = True,
) -> Insert:
    """Return ``INSERT INTO table (names..., key) SELECT ..., <new key>``: one id per row.

    ``table.insert().from_select(names, select)`` fills a key left out of
    ``names`` from its Python default, which SQLAlchemy evaluates once for
    the whole statement: every row gets the same id and the second one is a
    duplicate key. This adds the database's generator to the SELECT, which
    runs once per row, so the key column needs no server default.

    The generator is the one of :func:`~sqlalchemy_ulid.ulid_server_default`
    (a :class:`~sqlalchemy_ulid.ULIDType` key) or
    :func:`~sqlalchemy_ulid.uuid7_server_default` (a ``sa.Uuid`` key):

    * PostgreSQL: ``gen_ulid()`` / ``gen_uuid7()``, installed once with
      :func:`~sqlalchemy_ulid.install_ulid_function` /
      :func:`~sqlalchemy_ulid.install_uuid7_function`; PostgreSQL 18's own
      ``uuidv7()`` needs nothing.
    * MySQL 8.0.13+ / MariaDB 10.10+: an inline expression, nothing to install.
    * SQLite: call :func:`~sqlalchemy_ulid.register_ulid_function` /
      :func:`~sqlalchemy_ulid.register_uuid7_function` on the engine.

    Args:
        table: the target ``Table`` or mapped class.
        names: the target columns the SELECT fills, in its column order.
        select: the SELECT (a :func:`sqlalchemy.select`), one column per name.
        key: the column to fill; the table's primary key when omitted.
        include_defaults: as for ``from_select()``: whether the other
            columns left out get their Python defaults (evaluated once).

    Raises:
        InvalidInput: (before any SQL) the table has no single primary key
            and no ``key=``, the key is among ``names``, ``names`` and the
            SELECT's columns differ in number, or the key is stored as text.
        sqlalchemy.exc.CompileError: (at execution) the database has no
            generator of the key's kind.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.dialects import postgresql
        >>> from sqlalchemy_ulid import ULIDType, insert_from_select, new_ulid
        >>> md = sa.MetaData()
        >>> items = sa.Table("items", md, sa.Column("id", ULIDType(), primary_key=True))
        >>> copies = sa.Table(
        ...     "copies", md,
        ...     sa.Column("id", ULIDType(), primary_key=True, default=new_ulid),
        ...     sa.Column("source", ULIDType()),
        ... )
        >>> stmt = insert_from_select(copies, ["source"], sa.select(items.c.id))
        >>> print(" ".join(str(stmt.compile(dialect=postgresql.dialect())).split()))
        INSERT INTO copies (source, id) SELECT items.id, (gen_ulid()) AS id FROM items
    """
    target = _table_of(table)
    column = _key_of(target, key)
    given = [name if isinstance(name, str) else name.name for name in names]
    if column.name in given:
        raise InvalidInput(
            f"the SELECT already gives the key {column.name!r}: use "
            "table.insert().from_select() as it is"
        )
    if not isinstance(select, Select):
        raise InvalidInput(
            f"insert_from_select() needs a sqlalchemy.select(), got {type(select).__name__}: "
            "wrap a UNION as sa.select(union.subquery())"
        )
    if len(given) != len(select.selected_columns):
        raise InvalidInput(
            f"{len(given)} column names for a SELECT of {len(select.selected_columns)} columns"
        )
    with_key = select.add_columns(_generator(column).label(column.name))
    return target.insert().from_select(
        [*given, column.name], with_key, include_defaults=include_defaults
    )
