"""Comparisons on ULID columns: literal operands become ULIDs when built.

Item 2 (str ids checked at build time, the ORM evaluator, session.get),
item 6 (long id lists) and item 7 (LIKE) of issue 10, on every backend.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid


class Base(DeclarativeBase):
    type_annotation_map = {ULID: ULIDType}  # noqa: RUF012 (SQLAlchemy reads a plain dict)


class Note(Base):
    __tablename__ = "cmp_notes"

    id: Mapped[ULID] = mapped_column(primary_key=True, default=new_ulid)
    n: Mapped[int] = mapped_column(default=0)


class Tag(Base):
    __tablename__ = "cmp_tags"

    id: Mapped[ULID] = mapped_column(ULIDType("text"), primary_key=True, default=new_ulid)
    public_id: Mapped[str] = mapped_column(ULIDType(as_str=True), default=new_ulid)


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        yield session
    Base.metadata.drop_all(engine)


def _notes(session: Session, count: int) -> list[Note]:
    notes = [Note(n=i) for i in range(count)]
    session.add_all(notes)
    session.commit()
    return notes


BAD = [
    pytest.param("bad", InvalidULID, id="short text"),
    pytest.param("01HTQW311N1KR5G0Y75M3EF00U", InvalidULID, id="U is not Crockford"),
    pytest.param(b"\x01" * 15, InvalidULID, id="15 bytes"),
    pytest.param(7, TypeError, id="int"),
    pytest.param(datetime(2024, 1, 1, tzinfo=timezone.utc), TypeError, id="datetime"),
]


@pytest.mark.parametrize(("value", "error"), BAD)
def test_malformed_operands_raise_when_the_expression_is_built(
    session: Session, value: object, error: type[Exception]
) -> None:
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    with recording(engine) as sent:
        for build in (
            lambda: sa.select(Note).where(Note.id == value),
            lambda: sa.select(Note).where(Note.id > value),
            lambda: sa.select(Note).where(Note.id.in_([new_ulid(), value])),
            # an all-str list takes the one-pass decode: same errors
            lambda: sa.select(Note).where(Note.id.in_([str(new_ulid()), value])),
            lambda: sa.select(Note).where(Note.id.not_in([value, str(new_ulid()).lower()])),
            lambda: sa.update(Note).where(Note.id != value).values(n=1),
            lambda: sa.delete(Note).where(Note.id.between(value, new_ulid())),
        ):
            with pytest.raises(error):
                build()
    assert sent == []


def test_datetime_operand_names_the_way_out() -> None:
    with pytest.raises(TypeError, match=r"ULID\.min_at"):
        _ = Note.id >= datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_in_lists_of_one_kind_convert_as_a_whole(session: Session) -> None:
    notes = _notes(session, 3)
    ids = [note.id for note in notes]
    for values in ([str(u).lower() for u in ids], [str(u) for u in ids], ids, tuple(ids)):
        expression = Note.id.in_(values)
        # str lists are decoded when first needed, once: effective_value
        bound = expression.right.effective_value  # type: ignore[attr-defined]
        assert bound == ids
        assert expression.right.effective_value is bound  # type: ignore[attr-defined]
        assert all(type(u) is ULID for u in bound)
        assert session.scalars(sa.select(Note.n).where(expression).order_by(Note.n)).all() == [
            0,
            1,
            2,
        ]
    # from a generator (read once), and on an as_str column: canonical text
    assert Note.id.in_(str(u) for u in ids).right.effective_value == ids  # type: ignore[attr-defined]
    texts = Tag.public_id.in_([str(u).lower() for u in ids]).right.effective_value  # type: ignore[attr-defined]
    assert texts == [str(u) for u in ids]
    assert Tag.public_id.in_(ids).right.effective_value == [str(u) for u in ids]  # type: ignore[attr-defined]
    # the literal SQL of a str list names the same ids as a ULID list's
    for dialect in (session.get_bind().dialect,):
        as_text = sa.select(Note.n).where(Note.id.in_([str(u) for u in ids]))
        as_ulids = sa.select(Note.n).where(Note.id.in_(ids))
        literal = {"literal_binds": True}
        assert str(as_text.compile(dialect=dialect, compile_kwargs=literal)) == str(
            as_ulids.compile(dialect=dialect, compile_kwargs=literal)
        )


def test_every_id_form_becomes_a_ulid_in_the_expression(session: Session) -> None:
    notes = _notes(session, 3)
    target = notes[1].id
    for form in (str(target), str(target).lower(), target.to_uuid(), target.bytes):
        expression = Note.id == form
        assert expression.right.value == target  # type: ignore[attr-defined]
        assert type(expression.right.value) is ULID  # type: ignore[attr-defined]
        assert session.scalars(sa.select(Note.n).where(expression)).all() == [1]
    as_str = Tag.public_id == target.to_uuid()
    assert as_str.right.value == str(target)  # type: ignore[attr-defined]


@pytest.mark.parametrize("strategy", ["auto", "evaluate"])
def test_update_and_delete_with_str_ids_keep_the_session_in_sync(
    session: Session, strategy: str
) -> None:
    notes = _notes(session, 3)
    first, second = (str(note.id).lower() for note in notes[:2])
    session.execute(
        sa.update(Note).where(Note.id == first).values(n=10),
        execution_options={"synchronize_session": strategy},
    )
    assert notes[0].n == 10  # evaluated in Python: no refresh needed
    session.execute(
        sa.delete(Note).where(Note.id.in_([second])),
        execution_options={"synchronize_session": strategy},
    )
    assert notes[1] not in session
    session.commit()
    assert session.scalars(sa.select(Note.n).order_by(Note.id)).all() == [10, 2]


def test_session_get_with_a_str_id(session: Session) -> None:
    notes = _notes(session, 1)
    text = str(notes[0].id).lower()
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    with recording(engine) as sent:
        assert session.get(Note, notes[0].id) is notes[0]  # identity map, no SQL
    assert not any(s.lstrip().upper().startswith("SELECT") for s in sent)
    # A str id finds the same object; SQLAlchemy keys the identity map by
    # the value as given, so it costs one SELECT (documented in pitfalls.md).
    assert session.get(Note, text) is notes[0]
    assert session.get(Note, ULID(text)) is notes[0]
    with pytest.raises(sa.exc.StatementError) as raised:
        session.get(Note, "bad")
    assert isinstance(raised.value.orig, InvalidULID)


def test_in_with_more_ids_than_a_statement_takes_parameters(session: Session) -> None:
    notes = _notes(session, 3)
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    # psycopg sends at most 65,535 parameters; PostgreSQL gets one array.
    # SQLite's limit is 32,766 variables; PyMySQL interpolates client-side.
    count = 70_000 if engine.dialect.name != "sqlite" else 20_000
    ids = [str(new_ulid()) for _ in range(count)] + [str(notes[2].id).lower(), notes[0].id]
    found = session.scalars(sa.select(Note.n).where(Note.id.in_(ids)).order_by(Note.n)).all()
    assert found == [0, 2]
    others = session.scalars(sa.select(Note.n).where(Note.id.not_in(ids))).all()
    assert others == [1]
    negated = session.scalars(sa.select(Note.n).where(~Note.id.in_(ids))).all()
    assert negated == [1]
    combined = sa.and_(Note.id.in_(ids), Note.n >= 2)
    assert session.scalars(sa.select(Note.n).where(combined)).all() == [2]
    with pytest.raises(InvalidULID):
        Note.id.in_([*ids, "bad"])


def test_long_in_lists_share_one_cached_statement(engine: Engine) -> None:
    Base.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            notes = _notes(session, 2)
            for note in notes:
                ids = [new_ulid() for _ in range(1500)] + [note.id]
                assert session.scalars(sa.select(Note.n).where(Note.id.in_(ids))).all() == [note.n]
    finally:
        Base.metadata.drop_all(engine)


def test_prefix_search_on_text_storage(session: Session) -> None:
    tags = [Tag() for _ in range(3)]
    session.add_all(tags)
    session.commit()
    prefix = str(tags[0].id)[:10]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no SQLAlchemy 2.1 deprecation warning
        found = session.scalars(sa.select(Tag).where(Tag.id.startswith(prefix))).all()
        like = session.scalars(sa.select(Tag).where(Tag.id.like(prefix + "%"))).all()
        none = session.scalars(sa.select(Tag).where(Tag.id.startswith("ZZ"))).all()
    assert set(found) == set(like) == {t for t in tags if str(t.id).startswith(prefix)}
    assert tags[0] in found
    assert none == []


def test_like_on_binary_storage_is_refused_at_build_time() -> None:
    for build in (lambda: Note.id.like("01H%"), lambda: Note.id.startswith("01H")):
        with pytest.raises(TypeError, match=r"ULIDType\('text'\)"):
            build()


def test_sql_operands_are_left_alone(session: Session) -> None:
    notes = _notes(session, 2)
    same = sa.select(Note.n).where(Note.id == sa.bindparam("wanted", type_=ULIDType()))
    assert session.scalars(same, {"wanted": str(notes[1].id)}).all() == [1]
    other = sa.orm.aliased(Note)
    joined = sa.select(Note.n).join(other, other.id == Note.id).order_by(Note.n)
    assert session.scalars(joined).all() == [0, 1]
    uuid_bound = sa.select(Note.n).where(Note.id.in_(sa.select(Note.id).where(Note.n == 0)))
    assert session.scalars(uuid_bound).all() == [0]
    assert uuid.UUID(int=notes[0].id.int) == notes[0].id.to_uuid()


@pytest.mark.parametrize("storage", ["auto", "binary", "text"])
@pytest.mark.parametrize("as_str", [False, True])
def test_long_in_lists_on_every_storage(
    engine: Engine, metadata: sa.MetaData, storage: str, as_str: bool
) -> None:
    table = sa.Table(
        "cmp_storage",
        metadata,
        sa.Column("id", ULIDType(storage, as_str=as_str), primary_key=True),  # type: ignore[arg-type]
    )
    metadata.create_all(engine)
    ids = [new_ulid() for _ in range(1500)]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": u} for u in ids[:3]])
        wanted = [str(u).lower() for u in ids]
        found = conn.scalars(sa.select(table.c.id).where(table.c.id.in_(wanted))).all()
        assert sorted(map(str, found)) == sorted(map(str, ids[:3]))
        rest = conn.scalars(sa.select(table.c.id).where(table.c.id.not_in(wanted[1:]))).all()
        assert list(map(str, rest)) == [str(ids[0])]


def test_in_with_a_single_str_is_sqlalchemy_s_own_error() -> None:
    # Not 26 one-character "ids": SQLAlchemy says what in_() takes.
    with pytest.raises(sa.exc.ArgumentError, match="IN expression list"):
        Note.id.in_(str(new_ulid()))  # type: ignore[arg-type]


def test_short_str_in_lists_share_one_cached_statement(session: Session) -> None:
    notes = _notes(session, 3)
    # The same statement shape each time: SQLAlchemy's cache serves the
    # later ones, and each must still bind its own ids.
    for note in notes:
        texts = [str(new_ulid()) for _ in range(5)] + [str(note.id).lower()]
        assert session.scalars(sa.select(Note.n).where(Note.id.in_(texts))).all() == [note.n]
        assert session.scalars(
            sa.select(Note.n).where(Note.id.not_in(texts)).order_by(Note.n)
        ).all() == [other.n for other in notes if other is not note]
    # and the cache key does not depend on the ids: later statements hit it
    conn = session.connection()
    hits = []
    for _ in range(3):
        texts = [str(new_ulid()) for _ in range(6)]
        result = conn.execute(sa.select(Note.__table__.c.n).where(Note.id.in_(texts)))
        assert result.all() == []
        hits.append(result.context.cache_hit)
    assert hits[1:] == [result.context.cache_hit.CACHE_HIT] * 2


@pytest.mark.parametrize(
    "bad",
    [
        "01HTQW311N1KR5G0Y75M3EF0,H",  # a comma, the separator of the one-pass check
        "01HTQW311N1KR5G0Y75M3EF00U",  # U is not in the alphabet
        "81HTQW311N1KR5G0Y75M3EF00H",  # first character above 7: over 128 bits
        "01HTQW311N1KR5G0Y75M3EF00",  # 25 characters
        "01HTQW311N1KR5G0Y75M3EF0 H",  # a space, which int() would skip
    ],
)
def test_a_bad_text_anywhere_in_a_str_in_list_raises_at_once(bad: str) -> None:
    good = [str(new_ulid()) for _ in range(3)]
    for values in ([bad, *good], [*good, bad], [good[0], bad, good[1]]):
        with pytest.raises(InvalidULID):
            Note.id.in_(values)


def test_str_in_lists_inside_subqueries_ctes_and_unions(session: Session) -> None:
    notes = _notes(session, 4)
    texts = [str(notes[1].id).lower(), str(notes[3].id)]
    inner = sa.select(Note.id).where(Note.id.in_(texts))
    # a subquery, a CTE and an IN (SELECT ...) each bind the decoded ids
    sub = inner.subquery()
    assert session.scalars(
        sa.select(Note.n).join(sub, sub.c.id == Note.id).order_by(Note.n)
    ).all() == [1, 3]
    cte = inner.cte("picked")
    assert session.scalars(
        sa.select(Note.n).where(Note.id.in_(sa.select(cte.c.id))).order_by(Note.n)
    ).all() == [1, 3]
    both = sa.union_all(
        sa.select(Note.n).where(Note.id.in_(texts[:1])),
        sa.select(Note.n).where(Note.id.in_(texts[1:])),
    )
    assert sorted(session.scalars(both).all()) == [1, 3]
    # text storage and as_str columns bind canonical text
    tags = [Tag() for _ in range(2)]
    session.add_all(tags)
    session.commit()
    wanted = [str(tags[1].id).lower()]
    assert session.scalars(sa.select(Tag).where(Tag.id.in_(wanted))).all() == [tags[1]]
    public = [tags[0].public_id.lower()]
    assert session.scalars(sa.select(Tag).where(Tag.public_id.in_(public))).all() == [tags[0]]
