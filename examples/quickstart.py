"""sqlalchemy-ulid in one minute: the script behind ``make demo``.

It writes a SQLite file in the current directory (``quickstart.sqlite3``,
recreated on every run; pass another path as the first argument), then:
generates, decodes and sorts ULIDs, defines a model with a ULID primary key,
inserts a batch, pages through it with a cursor, runs a "created since"
query and prints its query plan.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, created_since, new_ulid, paginate


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
    assert [str(u) for u in ids] == sorted(str(u) for u in ids)
    assert [u.bytes for u in ids] == sorted(u.bytes for u in ids)
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
    now = datetime.now(timezone.utc)
    with Session(engine) as session:
        # History first: one event a minute for the last 100 minutes, with ids
        # made for those times (as an import of old data would).
        for n in range(100):
            at = now - timedelta(minutes=100 - n)
            # (min_at converts exactly; float timestamp() can be 1 ms off)
            made = ULID.from_parts(ULID.min_at(at).timestamp_ms, os.urandom(10))
            session.add(Event(id=made, kind=kinds[n % len(kinds)], n=n))
        # Then a few live ones, with the default new_ulid.
        session.add_all([Event(kind="live", n=100 + n) for n in range(5)])
        session.commit()
        count = session.scalar(sa.select(sa.func.count()).select_from(Event))
        print(f"  inserted {count} events; column type: {Event.__table__.c.id.type!r}")
        numbers = session.scalars(sa.select(Event.n).order_by(Event.id)).all()
        assert numbers == list(range(105))
        print("  ORDER BY id returns them in creation order: yes")
        first = session.scalars(sa.select(Event).order_by(Event.id).limit(1)).one()
        print(f"  first: {first.id} {first.kind} (id read back as {type(first.id).__name__})")

        heading("Page through with after(cursor)")
        cursor, pages, seen = None, 0, []
        while True:
            page = paginate(session, sa.select(Event), Event.id, after=cursor, limit=25)
            pages += 1
            seen += [event.n for event in page.items]
            print(
                f"  page {pages}: {len(page.items):>2} events, "
                f"n {page.items[0].n:>3}..{page.items[-1].n:<3} next cursor {page.next_cursor}"
            )
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == list(range(105))

        heading("Created in the last 15 minutes")
        since = now - timedelta(minutes=15)
        stmt = sa.select(Event.n, Event.kind).where(created_since(Event.id, since))
        recent = session.execute(stmt.order_by(Event.id)).all()
        numbers = [r.n for r in recent]
        print(f"  {len(recent)} events since {since:%H:%M:%S} UTC: n = {numbers[0]}..{numbers[-1]}")
        assert [r.n for r in recent] == [*range(85, 105)]
        print(f"  SQL: {str(stmt).splitlines()[-1].strip()}")
        sql = stmt.compile(engine, compile_kwargs={"literal_binds": True})
        for row in session.execute(sa.text(f"EXPLAIN QUERY PLAN {sql}")):
            print(f"  plan: {row[-1]}")
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
