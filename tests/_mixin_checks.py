"""What every primary-key mixin must do, shared by the mixin tests of each key kind.

The models under test have a ``value`` integer column and a ``stored``
column the server fills (``server_default=now()``), mapped with
``eager_defaults``, so that a flush must read rows back with ``RETURNING``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from conftest import recording


def fresh_tables(engine: Engine, tables: Sequence[Any]) -> Iterator[None]:
    """A fixture body: ``tables`` made new for the test, and dropped after.

    Only these tables: the mixins' bases share their metadata with the
    doctests' models.
    """
    for table in reversed(tables):
        table.drop(engine, checkfirst=True)
    for table in tables:
        table.create(engine)
    yield
    for table in reversed(tables):
        table.drop(engine, checkfirst=True)


def flush_in_one_insert(engine: Engine, model: Any) -> list[Any]:
    """Flush 1,000 new ``model`` objects; return their ids, as made, in order.

    Asserts that one ``INSERT .. RETURNING`` wrote them all (the key is the
    insert sentinel), that its rows went back to the right objects, and that
    the ids were made in order: the database's order is the order made.
    """
    with Session(engine) as session, recording(engine) as seen:
        objects = [model(value=n) for n in range(1000)]
        session.add_all(objects)
        session.flush()
        inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT")]
        # One INSERT .. RETURNING for all 1,000 rows (SQLAlchemy batches up to
        # 1,000 rows a statement), not 1,000 single-row INSERTs.
        assert len(inserts) == 1
        assert "RETURNING" in inserts[0].upper()
        assert all(o.stored is not None for o in objects)
        made = [o.id for o in objects]
        session.commit()
        ids = session.scalars(sa.select(model.id).order_by(model.id)).all()
        values = session.scalars(sa.select(model.value).order_by(model.id)).all()
    assert made == ids  # made in order, stored in order
    assert values == list(range(1000))
    return made
