"""The writer's side of the settle margin: :func:`guard_ulid_age`.

``settle="auto"`` is sound while every writer sends its INSERT within
``margin`` of making the id (clock skew included). Ids made at flush
(``default=new_ulid``, the mixins) or by the server meet that by
milliseconds; an id made early by application code (``Model(id=new_ulid())``,
then a slow request, then the flush) need not. The guard turns the margin
into a check: before each INSERT reaches the driver, the ids of its new
rows (the ULIDType primary-key columns that are not foreign keys) are
compared with this process's clock, and an id older than ``max_age`` makes the INSERT raise
:class:`StaleULIDError` instead of being sent.

The id is refused, not re-made: by the time its INSERT is sent, the
application may hold it (the ORM's identity map, a foreign key in another
row of the same flush, a response already built), so a silent new id would
break those.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ._errors import SettleError
from ._settle import DEFAULT_MARGIN, margin_for
from ._types import ULIDType, to_bytes
from ._ulid import ULID

__all__ = ["StaleULIDError", "guard_ulid_age"]


class StaleULIDError(SettleError):
    """An INSERT would store a ULID made longer ago than the guard allows.

    Raised by the hook :func:`guard_ulid_age` installs, before the statement
    reaches the database; nothing of it is written. A :class:`SettleError`,
    so a ``ValueError``.

    Attributes:
        ulid: the oldest id of the statement.
        age: how old it was when the INSERT was about to be sent.
    """

    def __init__(self, message: str, ulid: ULID, age: timedelta) -> None:
        super().__init__(message)
        self.ulid = ulid
        self.age = age


@dataclass
class _Ids:
    """What the hook knows of one execution's new-row ids."""

    oldest_ms: int  # the oldest id's Unix milliseconds
    oldest: ULID
    ascending: bool  # the rows' ids rise in the order the rows are sent


# Per execution: its new-row ids, or None. An INSERT ... RETURNING of many
# rows is sent in several batches (insertmanyvalues), each through the hook;
# the ids are read once, at the first.
_IDS: weakref.WeakKeyDictionary[Any, _Ids | None] = weakref.WeakKeyDictionary()


# Per compiled INSERT: the parameter keys of the ids it checks.
_KEYS: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def _checked_keys(compiled: Any) -> list[str]:
    """The keys of the parameters that hold the new rows' own ids.

    Those are the ULIDType columns of the table's primary key that are not
    foreign keys: a feed pages on them. A foreign key names an existing row
    (an order's customer, made last year) and is never refused. A
    multi-row ``VALUES`` names its parameters ``<key>_m<n>``.
    """
    keys = _KEYS.get(compiled)
    if keys is None:
        table = getattr(compiled.statement, "table", None)
        columns = getattr(getattr(table, "primary_key", None), "columns", ())
        names = {
            column.key
            for column in columns
            if isinstance(column.type, ULIDType) and not column.foreign_keys
        }
        keys = [
            key
            for key in compiled.binds
            if key in names
            or (key.rpartition("_m")[0] in names and key.rpartition("_m")[2].isdigit())
        ]
        _KEYS[compiled] = keys
    return keys


def _ids(context: Any) -> _Ids | None:
    """The new-row ids this INSERT binds, or None."""
    if context in _IDS:
        return _IDS[context]
    keys = _checked_keys(context.compiled)
    found: _Ids | None = None
    previous: ULID | None = None
    for parameters in context.compiled_parameters if keys else ():
        for key in keys:
            value = parameters.get(key)
            if value is None:
                continue
            ulid = value if type(value) is ULID else ULID.from_bytes(to_bytes(value))
            if found is None:
                found = _Ids(ulid._int >> 80, ulid, ascending=True)
            elif ulid < found.oldest:
                found.oldest_ms, found.oldest = ulid._int >> 80, ulid
            if previous is not None and ulid <= previous:
                found.ascending = False
            previous = ulid
    _IDS[context] = found
    return found


def _hook(max_ms: int, clock: Callable[[], float]) -> Callable[..., None]:
    # The executions whose first batch this guard checked and let through.
    checked: weakref.WeakSet[Any] = weakref.WeakSet()

    def before_cursor_execute(
        conn: Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        if context is None or not getattr(context, "isinsert", False) or context.compiled is None:
            return
        ids = _ids(context)
        if ids is None or (ids.ascending and context in checked):
            # A later batch of rising ids sits behind the rows its first batch
            # sent, uncommitted in this transaction: a reader's scan stops at
            # those until the commit, so it cannot pass these. (Ids out of
            # order are checked again at every batch.)
            return
        age_ms = int(clock() * 1000) - ids.oldest_ms
        if age_ms > max_ms:
            age = timedelta(milliseconds=age_ms)
            raise StaleULIDError(
                f"refusing an INSERT of the id {ids.oldest}, made {age.total_seconds():.3f} s "
                f"ago: the guard allows {max_ms / 1000:g} s (max_age=). A feed with "
                "settle='auto' and a margin of that size could skip the row. Make the id "
                "at flush (default=new_ulid), or raise max_age= and the readers' margin= "
                "together",
                ids.oldest,
                age,
            )
        checked.add(context)

    return before_cursor_execute


def guard_ulid_age(
    bind: Engine | Connection | Any,
    max_age: timedelta = DEFAULT_MARGIN,
    *,
    clock: Callable[[], float] | None = None,
) -> Callable[[], None]:
    """Refuse INSERTs of ULIDs made more than ``max_age`` ago; return the undo.

    ``settle="auto"`` delivers every row while each writer sends its INSERT
    within ``margin=`` of making the id. With this guard on the writers'
    engine, that is checked rather than hoped: before an INSERT reaches the
    driver, the id of each new row (the :class:`ULIDType` columns of the
    table's primary key that are not foreign keys: what a feed pages on) is
    compared with this process's clock (the one :func:`new_ulid` reads),
    and one older than ``max_age`` raises :class:`StaleULIDError`; nothing
    is sent. Foreign keys, UPDATEs, DELETEs and SELECTs are never refused.
    ORM flushes are covered: the hook sees each INSERT as it is handed to
    the driver. A statement of many rows is checked before its first batch
    (SQLAlchemy's ``insertmanyvalues``; a driver's own ``executemany``
    sends all its rows after that one check). Its later batches are checked
    again only when its ids do not rise in the order the rows are sent:
    rising ids sit behind the rows the first batch already wrote, which a
    reader's scan waits for until the commit.
    Give the readers a ``margin`` of at least
    ``max_age`` plus the clock skew :func:`check_clock_skew` bounds.

    Ids made by the database (``ulid_server_default()``) are not seen and
    need no guard: they are made at INSERT time.

    A connection pooler in transaction mode (PgBouncer, RDS Proxy,
    Supavisor) can still hold the transaction in its queue after this
    check; there, let the database check the ids with
    :func:`guard_ulid_age_ddl` (PostgreSQL).

    Args:
        bind: the writers' Engine or Connection (an ``AsyncEngine`` or
            ``AsyncConnection``: pass its ``sync_engine`` /
            ``sync_connection``, or the async object itself).
        max_age: the oldest an id may be when its INSERT is sent; by
            default the database's default margin (0.2 s on PostgreSQL,
            1 s on MariaDB/MySQL).
        clock: this process's clock as Unix seconds (``time.time`` by
            default); tests inject a skewed one.

    Returns:
        A function that removes the guard.

    Raises:
        TypeError, ValueError: bad arguments.

    Example:
        >>> import sqlalchemy as sa
        >>> from datetime import timedelta
        >>> from sqlalchemy_ulid import ULID, ULIDType, StaleULIDError, guard_ulid_age, new_ulid
        >>> engine = sa.create_engine("sqlite://")
        >>> t = sa.Table("t", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
        >>> t.metadata.create_all(engine)
        >>> remove = guard_ulid_age(engine, timedelta(milliseconds=200))
        >>> with engine.begin() as conn:
        ...     _ = conn.execute(t.insert(), {"id": new_ulid()})  # made just now: sent
        >>> old = ULID.from_parts(new_ulid().timestamp_ms - 5000, bytes(10))
        >>> try:
        ...     with engine.begin() as conn:
        ...         _ = conn.execute(t.insert(), {"id": old})
        ... except StaleULIDError as error:
        ...     print(round(error.age.total_seconds()))
        5
        >>> remove()
    """
    if isinstance(max_age, bool) or not isinstance(max_age, timedelta):
        raise TypeError(f"max_age must be a timedelta, not {type(max_age).__name__}")
    if max_age <= timedelta(0):
        # Every id is older than zero by the time its INSERT is sent.
        raise ValueError(f"max_age must be positive, got {max_age!r}")
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a callable returning Unix seconds, not {clock!r}")
    target = getattr(bind, "sync_engine", None) or getattr(bind, "sync_connection", None) or bind
    if not isinstance(target, (Engine, Connection)):
        raise TypeError(f"bind must be an Engine or a Connection, not {type(bind).__name__}")
    max_age = margin_for(max_age, target.dialect)
    hook = _hook(max_age // timedelta(milliseconds=1), clock or time.time)
    sa.event.listen(target, "before_cursor_execute", hook)

    def remove() -> None:
        if sa.event.contains(target, "before_cursor_execute", hook):
            sa.event.remove(target, "before_cursor_execute", hook)

    return remove
