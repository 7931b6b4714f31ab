"""A SQLModel model with a ULID primary key.

SQLModel derives the column type from the annotation, and knows nothing about
ULIDs, so the field names its SQLAlchemy type with ``sa_type=ULIDType``.
``default_factory=new_ulid`` fills the id when the object is created, so it is
known before the INSERT (useful for building links or related rows first).
The same model validates and serializes API input and output: a ULID field
accepts the 26-character text and dumps it back as text.

Usage: ``python examples/sqlmodel_example.py [DATABASE_URL]`` (default: an
in-memory SQLite database; ``DATABASE_URL`` in the environment works too).
"""

from __future__ import annotations

import os
import sys

from sqlmodel import Field, Session, SQLModel, create_engine, select

from sqlalchemy_ulid import ULID, ULIDType, new_ulid


class Hero(SQLModel, table=True):
    __tablename__ = "sqlmodel_heroes"

    id: ULID = Field(default_factory=new_ulid, primary_key=True, sa_type=ULIDType)
    name: str
    team_id: ULID | None = Field(default=None, sa_type=ULIDType, index=True)


class HeroIn(SQLModel):
    """What an API accepts: the team id arrives as text and is validated."""

    name: str
    team_id: ULID | None = None


def main(url: str) -> int:
    engine = create_engine(url)
    SQLModel.metadata.drop_all(engine)
    SQLModel.metadata.create_all(engine)

    team = new_ulid()
    incoming = HeroIn.model_validate({"name": "Deadpond", "team_id": str(team).lower()})
    heroes = [
        Hero.model_validate(incoming),
        Hero(name="Rusty-Man", team_id=team),
        Hero(name="Solo"),
    ]
    with Session(engine) as session:
        session.add_all(heroes)
        session.commit()
        rows = session.exec(select(Hero).order_by(Hero.id)).all()
        for hero in rows:
            print(f"{hero.id}  {hero.name:<10} team={hero.team_id}")
        assert [hero.name for hero in rows] == ["Deadpond", "Rusty-Man", "Solo"]
        assert all(isinstance(hero.id, ULID) for hero in rows)

        same_team = session.exec(select(Hero.name).where(Hero.team_id == str(team))).all()
        assert sorted(same_team) == ["Deadpond", "Rusty-Man"]
        print(f"team {team}: {', '.join(sorted(same_team))}")

        by_id = session.get(Hero, str(rows[2].id))  # text works as a primary key too
        assert by_id is rows[2]
        print("as JSON:", rows[0].model_dump_json())
    SQLModel.metadata.drop_all(engine)
    engine.dispose()
    return 0


if __name__ == "__main__":
    default = os.environ.get("DATABASE_URL", "sqlite://")
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else default))
