"""CockroachDB: a hash-sharded primary key for ULID and UUIDv7 keys.

Time-ordered keys arrive in key order, so on CockroachDB every new row
lands in the last range of the table's primary index, one node's hot spot.
A hash-sharded index (``PRIMARY KEY (id) USING HASH``) spreads them over
buckets. Declare it with :func:`hash_sharded_primary_key` in place of
``primary_key=True``::

    from sqlalchemy_ulid.contrib.cockroachdb import hash_sharded_primary_key

    events = sa.Table(
        "events", metadata,
        sa.Column("id", ULIDType(), server_default=ulid_server_default()),
        sa.Column("body", sa.Text),
        hash_sharded_primary_key("id", bucket_count=16),
    )

On CockroachDB (the ``sqlalchemy-cockroachdb`` dialect) the table's DDL
reads ``PRIMARY KEY (id) USING HASH WITH (bucket_count = 16)``; on any
other database it is a plain primary key. Pages and time ranges keep
working: CockroachDB reads a range of a hash-sharded index bucket by bucket.

Compile-tested only: no CockroachDB server runs in this project's tests.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import DDLCompiler

__all__ = ["HashShardedPrimaryKey", "hash_sharded_primary_key"]


class HashShardedPrimaryKey(sa.PrimaryKeyConstraint):
    """A primary key that CockroachDB stores as a hash-sharded index.

    Attributes:
        bucket_count: the number of buckets (None: CockroachDB's default).
    """

    bucket_count: int | None = None


def hash_sharded_primary_key(
    *columns: str | sa.Column[Any], bucket_count: int | None = None, name: str | None = None
) -> HashShardedPrimaryKey:
    """Return a table's primary key, hash-sharded on CockroachDB.

    Args:
        columns: the key's columns (names or columns), as for
            ``sa.PrimaryKeyConstraint``.
        bucket_count: how many buckets (2 or more; None: CockroachDB's
            default, 16).
        name: the constraint's name.

    Raises:
        ValueError: ``bucket_count`` is not an int of at least 2.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType
        >>> from sqlalchemy_ulid.contrib.cockroachdb import hash_sharded_primary_key
        >>> t = sa.Table("events", sa.MetaData(), sa.Column("id", ULIDType()),
        ...              hash_sharded_primary_key("id", bucket_count=8))
        >>> from sqlalchemy.dialects import postgresql
        >>> ddl = str(sa.schema.CreateTable(t).compile(dialect=postgresql.dialect()))
        >>> "PRIMARY KEY (id)" in ddl, "USING HASH" in ddl  # elsewhere: a plain key
        (True, False)
    """
    if bucket_count is not None and (
        isinstance(bucket_count, bool) or not isinstance(bucket_count, int) or bucket_count < 2
    ):
        raise ValueError(f"bucket_count must be an int of at least 2, got {bucket_count!r}")
    key = HashShardedPrimaryKey(*columns, name=name)
    key.bucket_count = bucket_count
    return key


# Registered for our own constraint class and this one dialect name only.
@compiles(HashShardedPrimaryKey, "cockroachdb")
def _compile_hash_sharded(element: HashShardedPrimaryKey, compiler: DDLCompiler, **kw: Any) -> str:
    sql: str = compiler.visit_primary_key_constraint(element, **kw)
    if not sql:
        return sql
    sql += " USING HASH"
    if element.bucket_count is not None:
        sql += f" WITH (bucket_count = {int(element.bucket_count)})"
    return sql
