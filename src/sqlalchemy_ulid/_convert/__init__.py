"""Storage conversion SQL: one module per database, both key kinds in each.

Used by the Alembic storage conversion ops, so that a conversion is one
set-based statement that also works in Alembic's offline (``--sql``) mode.
Every conversion goes through 32 hexadecimal digits: ``text -> hex -> uuid``,
``bytea -> hex -> text`` and so on, so each database needs only a "to hex"
and a "from hex" expression per storage kind.

A database's module (``postgresql``, ``mysql``, ``sqlite``) holds how its
16-byte storages (a uuid type, binary) go to and from hex, and how a
statement fails naming a value, once; each key kind's :class:`ConvertSQL`
adds that kind's text forms and checks to them: ``ULID`` (26 Crockford
characters) and ``UUID7`` (the 36-character form and 32 hex digits, version
7 and variant ``10`` checked on every storage). Each database's row in
``_dialects`` holds them in its ``keys``, by kind name; a key kind reads its
own with ``KeyKind.convert(row)``.
"""

from __future__ import annotations

from . import mysql, postgresql, sqlite
from ._sql import ConvertSQL

__all__ = ["ConvertSQL", "mysql", "postgresql", "sqlite"]
