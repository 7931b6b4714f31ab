"""Pins for the private SQLAlchemy attributes we still rely on (item 8 of issue 10).

Where SQLAlchemy offers no public API, we read a private attribute. These
tests assert each one still behaves as we use it, and run in CI on the
lowest and the newest supported SQLAlchemy, so an upgrade that changes one
fails here, with its name, rather than somewhere inside pagination.
"""

from __future__ import annotations

import inspect
import uuid

import pytest
import sqlalchemy as sa

from sqlalchemy_ulid import ULIDType, _types

_table = sa.Table(
    "pinned",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("n", sa.Integer),
)


def test_select_order_by_clauses_lists_the_order_by_elements() -> None:
    # _pagination._check_order walks these to verify the keyset order.
    assert tuple(sa.select(_table)._order_by_clauses) == ()
    stmt = sa.select(_table).order_by(_table.c.id.desc(), _table.c.n)
    clauses = list(stmt._order_by_clauses)
    assert len(clauses) == 2
    assert clauses[0].compare(_table.c.id.desc())
    assert clauses[1].compare(_table.c.n)
    assert tuple(stmt.order_by(None)._order_by_clauses) == ()


def test_select_has_row_limiting_clause_sees_limit_offset_and_fetch() -> None:
    # _pagination refuses a statement that already limits its rows.
    stmt = sa.select(_table)
    assert not stmt._has_row_limiting_clause
    assert stmt.limit(5)._has_row_limiting_clause
    assert stmt.offset(5)._has_row_limiting_clause
    assert stmt.fetch(5)._has_row_limiting_clause
    assert not stmt.limit(5).limit(None)._has_row_limiting_clause


@pytest.mark.skipif(
    "sort_by_parameter_order" not in inspect.signature(sa.Insert.returning).parameters,
    reason="SQLAlchemy < 2.0.10 has no sort_by_parameter_order",
)
def test_insert_sort_by_parameter_order_flag() -> None:
    # _bulk reads it to convert the ids of ordered bulk inserts only.
    stmt = sa.insert(_table)
    assert not getattr(stmt, "_sort_by_parameter_order", False)
    assert not stmt.returning(_table.c.id)._sort_by_parameter_order
    assert stmt.returning(_table.c.id, sort_by_parameter_order=True)._sort_by_parameter_order


def test_ulid_type_uses_the_public_attach_event_not_set_parent() -> None:
    # The private TypeDecorator._set_parent is no longer overridden.
    assert "_set_parent" not in ULIDType.__dict__
    assert sa.event.contains(ULIDType, "after_parent_attach", _types._on_attach)


def test_sentinel_value_resolver_where_sqlalchemy_still_calls_it() -> None:
    # SQLAlchemy 2.0.10 to 2.0.28 call TypeEngine._sentinel_value_resolver to
    # match bulk RETURNING rows; 2.0.29 removed the call (issue 11160).
    from sqlalchemy.dialects import postgresql, sqlite

    resolve = ULIDType()._sentinel_value_resolver(postgresql.dialect())
    assert resolve is not None
    u = ULIDType().process_bind_param("01HTQW311N1KR5G0Y75M3EF00H", postgresql.dialect())
    # RETURNING reads the uuid as its 16 bytes (uuid_send): so does the match
    assert resolve(u) == uuid.UUID("018eafc1-8435-0cf0-5803-c72d06e78011").bytes
    assert ULIDType()._sentinel_value_resolver(sqlite.dialect()) is None


def test_order_by_a_label_is_wrapped_in_label_references() -> None:
    # _paging._sort unwraps these to find the key behind ORDER BY label /
    # ORDER BY "name" (the latter is refused).
    label = sa.func.lower(_table.c.n).label("low")
    by_label = sa.select(_table, label).order_by(label.desc())._order_by_clauses[0]
    assert isinstance(by_label, sa.sql.elements._label_reference)
    assert by_label.element.element is label
    by_name = sa.select(_table).order_by("n")._order_by_clauses[0]
    assert isinstance(by_name, sa.sql.elements._textual_label_reference)


def test_select_setup_joins_and_from_obj_hold_the_joins() -> None:
    # _paging._nulls reads them to tell whether an outer join can make a NOT
    # NULL sort key NULL, without compiling the statement.
    other = sa.Table("pinned_other", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
    joined = sa.select(_table).outerjoin(other, other.c.id == _table.c.id)
    (*_, flags) = joined._setup_joins[0]
    assert flags == {"isouter": True, "full": False}
    assert sa.select(_table)._setup_joins == ()
    froms = sa.select(_table).select_from(_table.outerjoin(other, other.c.id == _table.c.id))
    assert froms._from_obj[0].isouter


def test_select_group_by_having_and_distinct_on_clauses() -> None:
    # _paging._wrap reads them to page a grouped or DISTINCT ON statement as a
    # subquery, and _paging._sort to find a paging column made unique by GROUP BY.
    grouped = sa.select(_table.c.n, sa.func.count()).group_by(_table.c.n)
    assert grouped._group_by_clauses[0].compare(_table.c.n)
    assert sa.select(_table)._group_by_clauses == ()
    assert grouped.having(sa.func.count() > 1)._having_criteria
    assert sa.select(_table)._having_criteria == ()
    assert sa.select(_table)._distinct_on == ()
    assert sa.select(_table, _table.c.n)._raw_columns == [_table, _table.c.n]
    assert getattr(sa.select(_table), "_pre_columns_clause", None) is None
    try:  # SQLAlchemy 2.1: a syntax extension, placed before the columns
        from sqlalchemy.dialects.postgresql import distinct_on
    except ImportError:  # SQLAlchemy 2.0: a Select attribute
        assert sa.select(_table).distinct(_table.c.n)._distinct_on
    else:
        extended = sa.select(_table).ext(distinct_on(_table.c.n))
        assert extended._pre_columns_clause is not None


def test_select_attributes_that_decide_how_a_uuid_is_read() -> None:
    # SELECT DISTINCT ... ORDER BY keeps the uuid in the SELECT list: _types
    # reads these attributes of the SELECT on the compiler's stack.
    from sqlalchemy.dialects import postgresql

    table = sa.Table("read_pin", sa.MetaData(), sa.Column("id", ULIDType()))
    stmt = sa.select(table.c.id).distinct().order_by(table.c.id)
    assert stmt._distinct is True
    assert stmt._distinct_on == ()
    assert len(stmt._order_by_clauses) == 1
    assert "uuid_send" not in str(stmt.compile(dialect=postgresql.dialect()))
    ordered = sa.select(table.c.id).order_by(table.c.id)
    assert "uuid_send(read_pin.id)" in str(ordered.compile(dialect=postgresql.dialect()))


def test_uuid_instances_are_filled_through_their_two_slots() -> None:
    # _uuid7 makes each uuid.UUID by filling the slots "int" and "is_safe"
    # of a bare instance, as CPython 3.14's uuid7() does.
    assert {"int", "is_safe"} <= set(uuid.UUID.__slots__)
    made = object.__new__(uuid.UUID)
    uuid.UUID.int.__set__(made, 1 << 100)  # type: ignore[attr-defined]
    uuid.UUID.is_safe.__set__(made, uuid.SafeUUID.unknown)  # type: ignore[attr-defined]
    assert made == uuid.UUID(int=1 << 100)
    assert hash(made) == hash(uuid.UUID(int=1 << 100))
    assert str(made) == str(uuid.UUID(int=1 << 100))
