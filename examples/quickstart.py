"""sqlalchemy-ulid in one minute: the script behind ``make demo``.

It writes a SQLite file in the current directory (``quickstart.sqlite3``,
recreated on every run; pass another path as the first argument), then:
generates, decodes and sorts ULIDs, defines a model with a ULID primary key,
inserts a batch and reads it back in creation order.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid


class Base(DeclarativeBase):
    pass


class Event(Base):
    __tablename__ = "events"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    kind: Mapped[str] = mapped_column(sa.String(20))
    n: Mapped[int]


def heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 60 - len(text)))


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path("quickstart.sqlite3")
    path.unlink(missing_ok=True)

    heading("Generate")
    ids = [new_ulid() for _ in range(3)]
    for ulid in ids:
        print(f"  {ulid}  made at {ulid.datetime:%H:%M:%S.%f}"[:-3])
    assert ids == sorted(ids), "ULIDs from one process are strictly increasing"
    print("  sorted as objects, as text and as bytes: yes")

    heading("Decode")
    ulid = ULID("01HTQW311N1KR5G0Y75M3EF00H")
    print(f"  text        {ulid}")
    print(f"  timestamp   {ulid.timestamp_ms} ms = {ulid.datetime.isoformat()}")
    print(f"  randomness  {ulid.randomness.hex()}")
    print(f"  as UUID     {ulid.to_uuid()}")
    try:
        ULID("01HTQW311N1KR5G0Y75M3EF00U")
    except InvalidULID as exc:
        print(f"  rejected    01HTQW311N1KR5G0Y75M3EF00U: {exc}")

    heading(f"Store: {path}")
    engine = sa.create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    kinds = ["signup", "login", "purchase", "logout"]
    with Session(engine) as session:
        session.add_all([Event(kind=kinds[n % len(kinds)], n=n) for n in range(100)])
        session.commit()
        count = session.scalar(sa.select(sa.func.count()).select_from(Event))
        print(f"  inserted {count} events; column type: {Event.__table__.c.id.type!r}")
        numbers = session.scalars(sa.select(Event.n).order_by(Event.id)).all()
        assert numbers == list(range(100))
        print("  ORDER BY id returns them in creation order: yes")
        first = session.scalars(sa.select(Event).order_by(Event.id).limit(1)).one()
        print(f"  first: {first.id} {first.kind} (id read back as {type(first.id).__name__})")
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
