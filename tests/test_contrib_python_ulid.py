"""python-ulid objects both ways: binds into ULIDType, PythonULIDType results, pydantic."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import pydantic
import pytest
import sqlalchemy as sa
import ulid
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid, paginate
from sqlalchemy_ulid.contrib.python_ulid import PythonULIDType, new_python_ulid, to_python_ulid


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "contrib_python_ulid_orders"

    id: Mapped[ulid.ULID] = mapped_column(
        PythonULIDType(), primary_key=True, default=new_python_ulid
    )
    ref: Mapped[ulid.ULID | None] = mapped_column(PythonULIDType("text"))
    ours: Mapped[ULID | None] = mapped_column(ULIDType())


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    yield Order.__table__  # type: ignore[misc]
    Base.metadata.drop_all(engine)


def test_binds_accept_python_ulid_and_the_default_type_returns_ours(
    engine: Engine, table: sa.Table
) -> None:
    theirs = ulid.ULID()
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": new_python_ulid(), "ours": theirs}])
        got = conn.scalar(sa.select(table.c.ours).where(table.c.ours == theirs))
    assert type(got) is ULID
    assert got.bytes == theirs.bytes


def test_python_ulid_type_returns_python_ulid(engine: Engine, table: sa.Table) -> None:
    ours, theirs = new_ulid(), ulid.ULID()
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [{"ref": ours}, {"ref": theirs}, {"ref": str(ours).lower()}, {"ref": None}],
        )
        rows = conn.execute(sa.select(table.c.id, table.c.ref).order_by(table.c.id)).all()
        assert all(type(row.id) is ulid.ULID for row in rows)
        assert [row.ref for row in rows] == [
            ulid.ULID(ours.bytes),
            theirs,
            ulid.ULID(ours.bytes),
            None,
        ]
        # Comparisons take either kind of object, or text.
        for value in (ours, ulid.ULID(ours.bytes), str(ours)):
            assert conn.scalar(sa.select(sa.func.count()).where(table.c.ref == value)) == 2
        # A malformed id fails when the comparison is built, before any SQL.
        with pytest.raises(InvalidULID):
            table.c.ref == "01HTQW311N1KR5G0Y75M3EF00U"  # noqa: B015


def test_orm_holds_one_object_per_row(engine: Engine, table: sa.Table) -> None:
    with Session(engine) as session:
        order = Order()
        session.add(order)
        session.flush()
        assert type(order.id) is ulid.ULID
        # Loaded under the same identity as the object made by the flush.
        assert session.get(Order, order.id) is order
        assert session.scalars(sa.select(Order)).one() is order
        # Assigned values of any ULID kind become python-ulid objects at once.
        order.ref = new_ulid()
        assert type(order.ref) is ulid.ULID
        order.ref = str(ulid.ULID()).lower()
        assert type(order.ref) is ulid.ULID
        with pytest.raises(InvalidULID):
            order.ref = "nope"
        session.commit()


def test_paginate_on_a_python_ulid_column(engine: Engine, table: sa.Table) -> None:
    with engine.begin() as conn:
        conn.execute(table.insert(), [{} for _ in range(5)])
    with Session(engine) as session:
        first = paginate(session, sa.select(Order), Order.id, limit=3)
        rest = paginate(session, sa.select(Order), Order.id, after=first.next_cursor, limit=3)
    ids = [o.id for o in [*first.items, *rest.items]]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    assert first.next_cursor == str(first.items[-1].id)


def test_repr_and_python_type() -> None:
    assert repr(PythonULIDType()) == "PythonULIDType()"
    assert repr(PythonULIDType("text")) == "PythonULIDType('text')"
    assert PythonULIDType().python_type is ulid.ULID


def test_to_python_ulid() -> None:
    u = ULID("01HTQW311N1KR5G0Y75M3EF00H")
    assert to_python_ulid(u) == ulid.ULID.from_str(str(u))
    assert to_python_ulid(u.to_uuid()) == to_python_ulid(str(u).lower()) == to_python_ulid(u.bytes)
    with pytest.raises(InvalidULID):
        to_python_ulid("01HTQW311N1KR5G0Y75M3EF00U")
    with pytest.raises(TypeError):
        to_python_ulid(3.5)


# -- pydantic: one model for either type (the recipe in docs/ecosystem.md) -----------

TheirULID = Annotated[ulid.ULID, pydantic.BeforeValidator(to_python_ulid)]
OurULID = Annotated[
    ULID,
    pydantic.BeforeValidator(lambda v: ULID.from_bytes(v.bytes) if isinstance(v, ulid.ULID) else v),
]


def test_pydantic_model_typed_with_python_ulid_rejects_ours_without_the_recipe() -> None:
    class Plain(pydantic.BaseModel):
        id: ulid.ULID

    with pytest.raises((TypeError, pydantic.ValidationError)):
        Plain(id=new_ulid())


@pytest.mark.parametrize("kind", ["ours", "theirs", "text", "uuid"])
def test_pydantic_recipes_accept_either_type(kind: str) -> None:
    u = new_ulid()
    value = {"ours": u, "theirs": ulid.ULID(u.bytes), "text": str(u), "uuid": u.to_uuid()}[kind]

    class Theirs(pydantic.BaseModel):
        id: TheirULID

    class Ours(pydantic.BaseModel):
        id: OurULID

    assert Theirs(id=value).id == ulid.ULID(u.bytes)
    assert Ours(id=value).id == u
    assert (
        Theirs(id=value).model_dump_json() == Ours(id=value).model_dump_json() == f'{{"id":"{u}"}}'
    )


# -- the generator facts in the README's comparison table ------------------------------


def _forked_pair(generate: object) -> tuple[str, str]:
    """Generate once, fork, and return the next id made by the parent and by the child."""
    import os

    gen = generate  # type: ignore[assignment]
    gen()  # type: ignore[operator]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write_end, str(gen()).encode())  # type: ignore[operator]
        os._exit(0)
    os.close(write_end)
    mine = str(gen())  # type: ignore[operator]
    os.waitpid(pid, 0)
    child = os.read(read_end, 64).decode()
    os.close(read_end)
    return mine, child


def test_readme_fact_fork() -> None:
    # python-ulid's generator state is copied into a forked child, which then
    # continues its parent's sequence: within one millisecond both make the
    # same next id. A fixed clock makes that millisecond certain.
    theirs = ulid.ULIDGenerator(clock=lambda: 1_712_345_678_901)
    mine, child = _forked_pair(theirs.generate)
    assert mine == child, "python-ulid no longer repeats ids after fork: update the README"
    # Ours, on the real clock and as fast as it goes: never.
    for _ in range(100):
        mine, child = _forked_pair(new_ulid)
        assert mine != child


def test_readme_fact_clock_step_back() -> None:
    from sqlalchemy_ulid import MonotonicGenerator

    ticks = iter([1000, 1000, 999])
    theirs = ulid.ULIDGenerator(clock=lambda: next(ticks))
    a, b, c = theirs.generate(), theirs.generate(), theirs.generate()
    assert a < b
    assert not b < c, "python-ulid now orders across a clock step back: update the README"
    ticks = iter([1000, 1000, 999])
    ours = MonotonicGenerator(clock=lambda: next(ticks))
    x, y, z = ours(), ours(), ours()
    assert x < y < z


def test_alembic_render_item() -> None:
    from types import SimpleNamespace

    from sqlalchemy_ulid.contrib.python_ulid import render_item

    context = SimpleNamespace(imports=set())
    rendered = [
        render_item("type", PythonULIDType(), context),
        render_item("type", PythonULIDType("text"), context),
        render_item("type", ULIDType(), context),  # handed to the core render_item
        render_item("type", sa.Integer(), context),  # left to Alembic
    ]
    assert rendered == [
        "sqlalchemy_ulid.contrib.python_ulid.PythonULIDType()",
        "sqlalchemy_ulid.contrib.python_ulid.PythonULIDType('text')",
        "sqlalchemy_ulid.ULIDType()",
        False,
    ]
    assert context.imports == {
        "import sqlalchemy_ulid",
        "import sqlalchemy_ulid.contrib.python_ulid",
    }
    # The rendered code runs in a migration with those imports.
    namespace: dict[str, object] = {}
    for line in sorted(context.imports):
        exec(line, namespace)
    column_type = eval(str(rendered[1]), namespace)  # our own rendered code
    assert isinstance(column_type, PythonULIDType)
    assert column_type.storage == "text"
