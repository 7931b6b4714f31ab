"""The SQL of a sort by several keys: its ORDER BY and its keyset condition.

"The rows after a cursor" in a sort ``k1, k2, ..., id`` is

    k1 > :v1 OR (k1 = :v1 AND (k2 > :v2 OR (k2 = :v2 AND ... id > :id)))

with ``>`` read in each key's own direction, and NULL placed where the sort
puts it (``NULLS FIRST/LAST``, else the database's own order). Written as is,
a planner cannot range-scan it (sqlakeyset's page time grows with depth on
PostgreSQL), so:

* where every key has one direction, no key can be NULL, and the dialect
  range-scans row values (PostgreSQL, SQLite), it is the row-value
  comparison ``(k1, k2, id) > (:v1, :v2, :id)``;
* elsewhere (MariaDB 10.11 scans the whole index for a row value; mixed
  directions; nullable keys) the expansion above gets a redundant leading
  conjunct, ``k1 >= :v1``, which the planner turns into an index range.

Every value is a bound parameter of its key's own type (so a ``ULIDType``
binds its bytes inside a row value too), and every comparison runs in SQL,
under the database's collation: nothing is compared in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeEngine

from .._dialects import PagingSQL

__all__ = ["Keyset", "SortKey"]


@dataclass(frozen=True)
class SortKey:
    """One key of the sort.

    Attributes:
        expr: the expression compared in WHERE (a label's own expression).
        order: the expression as the ORDER BY names it (a label stays one).
        descending: DESC in the statement's ORDER BY.
        nulls: the explicit ``nulls_first()``/``nulls_last()``, else None.
        nullable: the key can be NULL in the result.
        nulls_after: in the statement's order, NULLs come after every value.
        raw: the database type the key is read and bound as, where its own
            type (a TypeDecorator) processes the values it returns; else None.
    """

    expr: ColumnElement[Any]
    order: ColumnElement[Any]
    descending: bool
    nulls: Literal["first", "last"] | None
    nullable: bool
    nulls_after: bool
    raw: TypeEngine[Any] | None = None

    @property
    def type(self) -> TypeEngine[Any]:
        """The type the key's values are read and bound as."""
        return self.expr.type if self.raw is None else self.raw

    def describe(self) -> str:
        """The key as the fingerprint of the sort sees it."""
        direction = "DESC" if self.descending else "ASC"
        expr = self.expr
        if isinstance(expr, sa.ColumnClause) and isinstance(expr.table, sa.Table):
            name = f"{expr.table.fullname}.{expr.name}"  # no compile for a plain column
        else:
            name = str(expr)
        return f"{name}|{direction}|{self.nulls or ''}"


@dataclass(frozen=True)
class Keyset:
    """The keys of a sort (the paging column last) and the dialect's facts."""

    keys: tuple[SortKey, ...]
    dialect: PagingSQL

    def order_by(self, reverse: bool) -> list[ColumnElement[Any]]:
        """The ORDER BY, in the statement's order or reversed (paging backward)."""
        clauses: list[ColumnElement[Any]] = []
        for key in self.keys:
            descending = key.descending != reverse
            clause = key.order.desc() if descending else key.order.asc()
            if key.nulls is not None:
                want_last = key.nulls_after != reverse
                if self.dialect.nulls_order:
                    clause = clause.nulls_last() if want_last else clause.nulls_first()
                elif want_last != (self.dialect.nulls_largest != descending):
                    # No NULLS FIRST/LAST here (MariaDB): order by IS NULL first.
                    is_null = key.expr.is_(None)
                    clauses.append(is_null.asc() if want_last else is_null.desc())
            clauses.append(clause)
        return clauses

    def past(
        self, binds: Sequence[ColumnElement[Any] | None], reverse: bool, inclusive: bool
    ) -> ColumnElement[bool]:
        """The rows after a position (``binds``: one per key, None for NULL).

        After in the statement's order, or in the reversed one; ``inclusive``
        takes the position's own row too.
        """
        keys = self.keys
        directions = [key.descending != reverse for key in keys]
        nulls_after = [key.nulls_after != reverse for key in keys]
        if (
            self.dialect.row_values
            and len(set(directions)) == 1
            and not any(key.nullable for key in keys)
            and all(bind is not None for bind in binds)
        ):
            left = sa.tuple_(*(key.expr for key in keys))
            right = sa.tuple_(*binds)
            if directions[0]:
                return left <= right if inclusive else left < right
            return left >= right if inclusive else left > right
        last, bound = keys[-1], binds[-1]
        assert bound is not None  # the paging column is never NULL
        if directions[-1]:
            condition = last.expr <= bound if inclusive else last.expr < bound
        else:
            condition = last.expr >= bound if inclusive else last.expr > bound
        for index in range(len(keys) - 2, -1, -1):
            key, bind = keys[index], binds[index]
            beyond = _beyond(key, bind, directions[index], nulls_after[index])
            equal = key.expr.is_(None) if bind is None else key.expr == bind
            condition = sa.or_(beyond, sa.and_(equal, condition))
        lead = _at_or_beyond(keys[0], binds[0], directions[0], nulls_after[0])
        return condition if lead is None else sa.and_(lead, condition)


def _beyond(
    key: SortKey, bind: ColumnElement[Any] | None, descending: bool, nulls_after: bool
) -> ColumnElement[bool]:
    """The key's values strictly after ``bind`` in the given direction."""
    if bind is None:
        return sa.false() if nulls_after else key.expr.is_not(None)
    beyond = key.expr < bind if descending else key.expr > bind
    return sa.or_(beyond, key.expr.is_(None)) if key.nullable and nulls_after else beyond


def _at_or_beyond(
    key: SortKey, bind: ColumnElement[Any] | None, descending: bool, nulls_after: bool
) -> ColumnElement[bool] | None:
    """The redundant leading range on the first key (None: every value)."""
    if bind is None:
        return key.expr.is_(None) if nulls_after else None
    at = key.expr <= bind if descending else key.expr >= bind
    return sa.or_(at, key.expr.is_(None)) if key.nullable and nulls_after else at
