"""One error family: every refusal of a caller's input is an InvalidInput.

A generator of bad inputs (cursors, limits, times) runs each through the
public API on SQLite and checks the refusal is an ``InvalidInput``, raised
before any SQL, and that a cursor of another sort is told apart from a
malformed one.
"""

from __future__ import annotations

import contextlib
import pickle
import string
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from conftest import recording
from sqlalchemy_ulid import (
    ULID,
    CursorSealer,
    CursorSortMismatch,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    InvalidTime,
    InvalidULID,
    PaginationError,
    ULIDType,
    created_between,
    created_since,
    paginate,
    partition_ddl,
    ulid_timestamp,
)

meta = sa.MetaData()
items = sa.Table(
    "errors_items",
    meta,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("rank", sa.Integer, nullable=False),
)
BY_ID = sa.select(items)
BY_RANK = sa.select(items).order_by(items.c.rank.desc(), items.c.id.desc())
BY_RANK_ASC = sa.select(items).order_by(items.c.rank, items.c.id)


@pytest.fixture(scope="module")
def sqlite() -> Iterator[Engine]:
    engine = sa.create_engine("sqlite://")
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            items.insert(),
            [{"id": ULID.from_parts(1_712_000_000_000 + k, k), "rank": k % 3} for k in range(9)],
        )
    yield engine
    engine.dispose()


def _refusal(engine: Engine, **kwargs: Any) -> InvalidInput:
    """The error paginate raises, checked to be an InvalidInput raised before any SQL."""
    stmt = kwargs.pop("stmt", BY_RANK)
    with recording(engine) as seen, engine.connect() as conn, pytest.raises(InvalidInput) as info:
        paginate(conn, stmt, items.c.id, **kwargs)
    assert seen == []
    return info.value


def _next(engine: Engine, stmt: sa.Select[Any]) -> str:
    with engine.connect() as conn:
        cursor = paginate(conn, stmt, items.c.id, limit=2).next_cursor
    assert cursor is not None
    return cursor


def test_the_family_is_one_valueerror_tree() -> None:
    for cls in (InvalidULID, InvalidCursor, CursorSortMismatch, InvalidLimit, InvalidTime):
        assert issubclass(cls, InvalidInput)
    assert issubclass(PaginationError, InvalidInput)
    assert issubclass(InvalidInput, ValueError)
    # Code written for bare-id cursors still catches every cursor error.
    assert issubclass(CursorSortMismatch, InvalidCursor)
    assert issubclass(InvalidCursor, InvalidULID)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=string.printable + "é€\x00", max_size=80))
def test_any_text_as_a_cursor_is_a_page_or_an_invalid_input(sqlite: Engine, text: str) -> None:
    for stmt in (BY_ID, BY_RANK):
        # any exception but an InvalidInput fails the test
        with sqlite.connect() as conn, contextlib.suppress(InvalidInput):
            paginate(conn, stmt, items.c.id, after=text, limit=3)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_edited_cursors_are_invalid_cursors_not_sort_mismatches(
    sqlite: Engine, data: st.DataObject
) -> None:
    cursor = _next(sqlite, BY_RANK)
    position = data.draw(st.integers(0, len(cursor) - 1))
    alphabet = string.ascii_letters + string.digits + "-_"
    char = data.draw(st.sampled_from(alphabet).filter(lambda c: c != cursor[position]))
    edited = cursor[:position] + char + cursor[position + 1 :]
    cut = data.draw(st.integers(0, len(cursor) - 1))
    for bad in (edited, cursor[:cut]):
        error = _refusal(sqlite, after=bad)
        assert isinstance(error, InvalidCursor)
        # an edit may land in the sort's fingerprint: still malformed (the check fails first)
        assert not isinstance(error, CursorSortMismatch), (bad, error)


@pytest.mark.parametrize(
    "limit",
    [
        0,  # below 1
        -1,  # negative
        10**9,  # above max_limit
        True,  # a bool is not a page size
        "10",  # text from a query string, not parsed
        2.0,  # a float
        None,  # missing
    ],
)
def test_bad_limits_are_invalid_limits_with_the_value(sqlite: Engine, limit: object) -> None:
    for stmt in (BY_ID, BY_RANK):
        error = _refusal(sqlite, stmt=stmt, limit=limit)
        assert type(error) is InvalidLimit
        assert error.value == limit
        assert type(error.value) is type(limit)
        assert "limit must be an int from 1 to max_limit=1000" in str(error)


def test_invalid_limit_pickles_with_its_value() -> None:
    error = pickle.loads(pickle.dumps(InvalidLimit("limit must be ...", 0)))
    assert type(error) is InvalidLimit
    assert error.value == 0
    assert str(error) == "limit must be ..."


def test_a_cursor_of_another_sort_is_told_apart(sqlite: Engine) -> None:
    by_rank_asc = _next(sqlite, BY_RANK_ASC)
    error = _refusal(sqlite, after=by_rank_asc)
    assert type(error) is CursorSortMismatch
    assert "another sort" in str(error)
    # a multi-key cursor on an id-order statement
    error = _refusal(sqlite, stmt=BY_ID, after=by_rank_asc)
    assert type(error) is CursorSortMismatch
    # a malformed one is not a mismatch
    error = _refusal(sqlite, after=by_rank_asc[:-3])
    assert type(error) is InvalidCursor


@pytest.mark.parametrize(
    "form",
    [str, lambda u: str(u).lower(), lambda u: str(u.to_uuid()), lambda u: u, ULID.to_uuid],
    ids=["text", "lowercase", "uuid-text", "ULID", "UUID"],
)
def test_a_bare_id_on_a_multi_key_sort_says_to_pass_next_cursor(sqlite: Engine, form: Any) -> None:
    bare = ULID.from_parts(1_712_000_000_000, 1)
    error = _refusal(sqlite, after=form(bare))
    assert type(error) is CursorSortMismatch
    assert "a bare id is a cursor of the id order" in str(error)
    assert "pass the next_cursor" in str(error)


def test_sealed_cursors_refuse_with_the_family(sqlite: Engine) -> None:
    sealer = CursorSealer(bytes(range(32)))
    with sqlite.connect() as conn:
        page = paginate(conn, BY_ID, items.c.id, limit=2)
    token, _ = sealer.seal(page)
    assert token is not None
    tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    with pytest.raises(InvalidCursor) as info:
        sealer.open(tampered)
    assert not isinstance(info.value, CursorSortMismatch)
    with pytest.raises(CursorSortMismatch):
        sealer.open(token, descending=True)


_NAIVE = datetime(2024, 1, 1)
_AWARE = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "call",
    [
        lambda: created_since(items.c.id, _NAIVE),  # naive
        lambda: created_since(items.c.id, datetime(1969, 12, 31, tzinfo=timezone.utc)),  # < 1970
        lambda: created_between(items.c.id, _AWARE, _AWARE - timedelta(days=1)),  # ends first
        lambda: ulid_timestamp(items.c.id) > _NAIVE,  # naive in a comparison
        lambda: partition_ddl(items.c.id, date(2024, 2, 1), date(2024, 1, 1)),  # ends first
        lambda: partition_ddl(items.c.id, _NAIVE, date(2024, 2, 1)),  # naive
        lambda: partition_ddl(items.c.id, _AWARE, _AWARE, interval="week"),  # type: ignore[arg-type]
    ],
)
def test_bad_times_and_intervals_are_invalid_times(call: Any) -> None:
    with pytest.raises(InvalidTime):
        call()


def test_a_sort_that_cannot_page_is_in_the_family(sqlite: Engine) -> None:
    error = _refusal(sqlite, stmt=sa.select(items).order_by(items.c.rank))  # id not last
    assert isinstance(error, PaginationError)


def test_after_and_before_together_are_refused(sqlite: Engine) -> None:
    bare = ULID.from_parts(1_712_000_000_000, 1)
    _refusal(sqlite, stmt=BY_ID, after=bare, before=bare)
