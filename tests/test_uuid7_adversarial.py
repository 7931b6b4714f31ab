"""UUIDv7 features driven the way users get them wrong, through the public API, on
SQLite, PostgreSQL 15 and MariaDB 10.11."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import Backend, recording
from sqlalchemy_ulid import (
    ULID,
    InvalidULID,
    MonotonicGenerator,
    ULIDAuditBase,
    UUIDv7AuditBase,
    UUIDv7Base,
    UUIDv7Generator,
    UUIDv7PrimaryKey,
    install_ulid_function,
    install_uuid7_function,
    new_uuid7,
)

# -- an injected clock that does not return int milliseconds ----------------------------


@pytest.mark.parametrize("make", [UUIDv7Generator, MonotonicGenerator])
@pytest.mark.parametrize(
    "reading",
    [
        1_700_000_000_000.5,  # time.time() * 1000: a float
        1_700_000_000_000.0,  # a float with no fraction is still not int milliseconds
        True,  # a bool is an int to Python, and would date every id at 1 ms
        False,
    ],
)
def test_a_clock_reading_that_is_not_int_milliseconds_is_a_clear_type_error(
    make: Callable[..., Callable[[], object]], reading: object
) -> None:
    gen = make(clock=lambda: reading)
    with pytest.raises(TypeError, match="must return int milliseconds"):
        gen()


# -- a UUIDv7 key assigned as text (an id from a URL) --------------------------------------


class OwnBase(DeclarativeBase):
    pass


class Card(UUIDv7Base):
    __tablename__ = "u7_adv_cards"

    n: Mapped[int]


class Token(OwnBase, UUIDv7PrimaryKey):  # the mixin last
    __tablename__ = "u7_adv_tokens"

    kind: Mapped[str] = mapped_column(sa.String(10))
    n: Mapped[int]
    __mapper_args__ = {"polymorphic_on": "kind", "polymorphic_identity": "token"}  # noqa: RUF012


class RefreshToken(Token):  # single-table inheritance: a mapper of its own
    __mapper_args__ = {"polymorphic_identity": "refresh"}  # noqa: RUF012


TABLES = [Card.__table__, Token.__table__]


@pytest.fixture
def tables(engine: Engine) -> Iterator[None]:
    for table in TABLES:
        table.drop(engine, checkfirst=True)  # type: ignore[attr-defined]
        table.create(engine)  # type: ignore[attr-defined]
    yield
    for table in TABLES:
        table.drop(engine)  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", [Card, Token, RefreshToken])
@pytest.mark.parametrize("spell", [str, lambda u: str(u).upper()], ids=["lower", "upper"])
def test_a_text_id_becomes_a_uuid_and_one_object_per_row(
    engine: Engine, tables: None, model: Any, spell: Callable[[uuid.UUID], str]
) -> None:
    made = new_uuid7()
    with Session(engine) as session:
        obj = model(id=spell(made), n=1)
        assert type(obj.id) is uuid.UUID
        assert obj.id == made
        session.add(obj)
        session.commit()
        # The identity map files it under the UUID: the same object comes back.
        assert session.get(model, made) is obj
        assert session.scalars(sa.select(model)).one() is obj
    with Session(engine) as session:
        assert session.scalars(sa.select(model.id)).one() == made


@pytest.mark.parametrize(
    "text",
    [
        "not-a-uuid",  # not hex at all
        "{%s}",  # braces: uuid.UUID() accepts them, a URL id should not
        "urn:uuid:%s",  # a URN
        "%s\n",  # a trailing newline
        " %s",  # a leading space
        "HEX",  # 32 hex digits without dashes
    ],
)
def test_a_malformed_text_id_is_refused_at_assignment(
    engine: Engine, tables: None, text: str
) -> None:
    made = new_uuid7()
    value = made.hex if text == "HEX" else text.replace("%s", str(made))
    with recording(engine) as sent, Session(engine) as session:
        with pytest.raises(InvalidULID):
            Card(id=value, n=1)
        card = Card(n=2)
        with pytest.raises(ValueError, match="36 characters"):
            card.id = value
        session.rollback()
    assert sent == []
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(Card.__table__)) == 0


@pytest.mark.parametrize(
    "value",
    [
        12345,  # an int
        b"\x01" * 16,  # raw bytes
        ULID.from_int(1),  # a ULID is not a UUIDv7 key
    ],
    ids=["int", "bytes", "ulid"],
)
def test_a_non_uuid_id_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=r"uuid\.UUID or its 36-character text"):
        Card(id=value, n=1)


def test_none_and_uuid_objects_are_kept(engine: Engine, tables: None) -> None:
    own = uuid.uuid4()  # the application's choice: kept as given
    with Session(engine) as session:
        session.add_all([Card(id=None, n=1), Card(id=own, n=2)])
        session.commit()
        ids = {n: id_ for n, id_ in session.execute(sa.select(Card.n, Card.id))}
    assert ids[1].version == 7
    assert ids[2] == own


# -- created_at of an object not flushed yet ------------------------------------------------


class Memo(UUIDv7AuditBase):
    __tablename__ = "u7_adv_memos"

    text: Mapped[str] = mapped_column(sa.String(20))


class Page(ULIDAuditBase):
    __tablename__ = "u7_adv_pages"

    text: Mapped[str] = mapped_column(sa.String(20))


@pytest.mark.parametrize("model", [Memo, Page])
def test_created_at_is_none_until_the_id_is_made_then_the_ids_time(
    engine: Engine, model: Any
) -> None:
    table = model.__table__
    table.drop(engine, checkfirst=True)
    table.create(engine)
    try:
        obj = model(text="draft")
        assert obj.created_at is None  # as a column default is, before the flush
        with Session(engine) as session:
            session.add(obj)
            assert obj.created_at is None
            session.flush()
            made = obj.created_at
            assert made is not None
            assert made.tzinfo is timezone.utc or made.utcoffset() == timedelta(0)
            assert made == session.scalar(sa.select(model.created_at))
            session.commit()
    finally:
        table.drop(engine)


# -- PostgreSQL's session counter and rolled-back work ----------------------------------------


def _probe_function(function: str) -> str:
    # a: kept; then a subtransaction runs the counter on and is rolled back
    # (as a savepoint is); b: made after it. One call: one millisecond, nearly always.
    return f"""
CREATE OR REPLACE FUNCTION pg_temp.adv_probe() RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    a uuid;
    b uuid;
BEGIN
    a := {function}();
    BEGIN
        PERFORM {function}() FROM generate_series(1, 5);
        RAISE EXCEPTION 'roll back';
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
    b := {function}();
    RETURN ARRAY[a, b];
END
$$"""


@pytest.mark.parametrize("function", ["gen_uuid7", "gen_ulid"])
def test_postgresql_ids_after_a_rollback_reuse_its_counts_and_sort_after_kept_ones(
    backends: dict[str, Backend], function: str
) -> None:
    pg = backends["postgresql"]
    if pg.engine is None:
        pytest.fail(f"required backend missing: {pg.reason}", pytrace=False)
    with pg.engine.connect() as conn:
        conn.execute(sa.text("SET LOCAL statement_timeout = '20s'"))
        (install_uuid7_function if function == "gen_uuid7" else install_ulid_function)(conn)
        conn.exec_driver_sql(_probe_function(function))
        pairs = [conn.scalar(sa.text("SELECT pg_temp.adv_probe()")) for _ in range(200)]
        # A whole transaction rolled back, then an id of the next one.
        kept = conn.scalar(sa.text(f"SELECT {function}()"))
        conn.commit()
        conn.scalars(sa.text(f"SELECT {function}() FROM generate_series(1, 50)")).all()
        conn.rollback()
        after = conn.scalar(sa.text(f"SELECT {function}()"))
        conn.rollback()
    # The counter sits right after the millisecond: 12 bits (UUIDv7), 16 (ULID).
    shift, mask = (64, 0xFFF) if function == "gen_uuid7" else (64, 0xFFFF)
    # PostgreSQL 18's gen_uuid7() is the server's uuidv7(): those 12 bits are
    # the time's fraction of a millisecond, which steps on by at least one
    # 1/4096 ms per call in a backend (rolled back or not): b after a and 5 more.
    version = pg.engine.dialect.server_version_info or ()
    server_fraction = function == "gen_uuid7" and version >= (18,)
    same_ms = 0
    for a, b in pairs:
        assert a < b  # the kept id still sorts first
        if a.int >> 80 == b.int >> 80:
            same_ms += 1
            steps = ((b.int >> shift) & mask) - ((a.int >> shift) & mask)
            if server_fraction:
                assert steps >= 6
            else:
                # ... with the count the rolled-back ids had used, and new random bits.
                assert steps == 1
            assert b.int & 0xFFFFFFFF != a.int & 0xFFFFFFFF
    assert same_ms > 0
    assert kept < after
