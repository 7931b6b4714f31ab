"""What the ops read from a database's catalog and session beyond SQLAlchemy's reflection.

Each database's ``catalog`` module (``alembic/postgresql/catalog.py``,
``alembic/mysql/catalog.py``, ``alembic/sqlite.py``) defines one
:class:`Catalog` subclass naming the dialects it serves, registered when it
is imported (``sqlalchemy_ulid.alembic`` imports them), as the engine's
``Database`` classes are; :func:`catalog_for` finds it. The readers shared by
the ops (``_inspect``) ask it, never the dialect's name. A dialect with no
catalog is refused with :class:`UnsupportedCatalog` before any SQL.

This module imports nothing of the package: the readers and the catalogs
both import it, so neither imports the other.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from sqlalchemy.engine import Connection, Dialect

__all__ = ["Catalog", "UnsupportedCatalog", "catalog_for"]

_REGISTRY: dict[str, type[Catalog]] = {}


class UnsupportedCatalog(ValueError):
    """The Alembic ops do not support this database."""


class Catalog:
    """A database's catalog facts and session settings the ops need (defaults: none)."""

    #: the dialect names this class serves
    __dialect__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.__dialect__:
            _REGISTRY[name] = cls

    def column_text(
        self, connection: Connection, table: str, column: str, schema: str | None
    ) -> tuple[str | None, str | None] | None:
        """The column's DEFAULT and COMMENT as the server has them (None: as reflected)."""
        return None

    def column_users(
        self, connection: Connection, table: str, column: str, schema: str | None
    ) -> list[str]:
        """Triggers and views whose SQL names the column, which its drop breaks (default: none)."""
        return []

    def column_users_check(
        self,
        dialect: Dialect,
        table: str,
        column: str,
        schema: str | None,
        refusal: tuple[str, str],
    ) -> str | None:
        """The script block refusing what :meth:`column_users` finds (None: no check).

        ``refusal`` is the message's text before and after the names.
        """
        return None

    def column_checks(
        self, connection: Connection, table: str, column: str, schema: str | None
    ) -> list[str]:
        """CHECK constraints naming the column that a conversion would leave half-done.

        The default: none (where DDL is transactional, a failed conversion
        is rolled back whole).
        """
        return []

    def reflected_name(self, name: str) -> str:
        """A name as SQLAlchemy's reflection reports it, as the server has it (the default: so)."""
        return name

    def strict_mode(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        """Make the session refuse, not coerce, bad values (the default: it always does)."""
        return contextlib.nullcontext()

    def utc_session(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        """Make the session read time values in UTC (the default: it does not convert)."""
        return contextlib.nullcontext()

    def plain_session(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        """Make the session read and write SQL as the dialect does (the default: it does)."""
        return contextlib.nullcontext()


def catalog_for(dialect: Dialect) -> Catalog:
    """The registered :class:`Catalog` of ``dialect``, or :class:`UnsupportedCatalog`."""
    cls = _REGISTRY.get(dialect.name)
    if cls is None:
        supported = ", ".join(sorted(_REGISTRY)) or "none registered"
        raise UnsupportedCatalog(
            f"the Alembic ops are not supported on {dialect.name} (supported: {supported})"
        )
    return cls()
