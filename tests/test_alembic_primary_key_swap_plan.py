"""The key conversion's swap is a list of engine steps, and it sends exactly them.

``_primary_key._phases.swap_steps`` turns the conversion's plan into
:class:`~sqlalchemy_ulid.alembic._plan.step.Step` objects: each its DDL and
a guard in SQL from the database's catalog (``alembic/<database>/catalog.py``).
Golden: the DDL the online op sends in its swap is the steps' statements, in
order (on MariaDB but the NOT NULL and comment steps its restating rename
left with nothing to do); and once it finished every guard says "done", so that a rerun of the
steps changes nothing (a guard that stayed true would run its DDL again).

Then what the online swap did differently from the offline PostgreSQL script
(which recreates foreign keys and indexes from the catalog's definitions):
their comments, and NOT VALID foreign keys.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid.alembic import ConversionRefused
from sqlalchemy_ulid.alembic._primary_key._phases import swap_steps
from sqlalchemy_ulid.alembic._primary_key._plan import Plan, build_plan
from test_alembic_primary_key import (
    _drop,  # noqa: F401  (the server fixture's clean-up)
    _seed,
)

#: What the prepare phase sends before the swap: the shadow columns.
_PREPARE = "ADD COLUMN"


def _ddl(statements: list[str]) -> list[str]:
    starts = ("ALTER TABLE", "CREATE INDEX", "CREATE UNIQUE INDEX", "DROP INDEX", "COMMENT ON")
    return [s for s in statements if s.lstrip().upper().startswith(starts)]


def _plan(engine: Engine, direction: str) -> Plan:
    with engine.connect() as conn:
        return build_plan(
            conn,
            "pk_customers",
            direction=direction,  # type: ignore[arg-type]
            legacy_id="legacy_id",
            schema=None,
            from_time="created_at" if direction == "ulid" else None,
        )


def _op(engine: Engine, name: str, **options: object) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction():
            getattr(Operations(context), name)("pk_customers", **options)


def _check(engine: Engine, plan: Plan, sent: list[str]) -> None:
    with engine.connect() as conn:
        steps = swap_steps(conn, plan)
        # Where the rename restates the column (MariaDB's CHANGE COLUMN, as
        # the script), its NOT NULL and comment steps find nothing to do: they
        # are there for a swap an earlier release began with a plain rename.
        restated = {
            step.label.removeprefix("rename ")
            for step in steps
            if step.label.startswith("rename ") and "CHANGE COLUMN" in step.statements[0]
        }
        needless = {f"{kind} {column}" for column in restated for kind in ("not null", "comment")}
        expected = [s for step in steps if step.label not in needless for s in step.statements]
        left = [
            step.label
            for step in steps
            if conn.exec_driver_sql(
                f"SELECT CASE WHEN ({step.guard}) THEN 1 ELSE 0 END".replace("%", "%%")
            ).scalar()
        ]
    ddl = _ddl(sent)
    assert len(expected) > 10
    assert ddl[len(ddl) - len(expected) :] == expected
    assert all(_PREPARE in s.upper() for s in ddl[: len(ddl) - len(expected)])
    assert left == []


def test_the_swap_sends_its_steps_both_ways(server: Engine) -> None:
    _seed(server)
    plan = _plan(server, "ulid")
    with recording(server) as sent:
        _op(server, "convert_primary_key_to_ulid", from_time="created_at")
    _check(server, plan, sent)

    plan = _plan(server, "legacy")
    with recording(server) as sent:
        _op(server, "restore_legacy_primary_key")
    _check(server, plan, sent)
    with server.connect() as conn:
        assert "legacy_id" not in {c["name"] for c in sa.inspect(conn).get_columns("pk_customers")}


_COMMENTED = """
CREATE TABLE pk_noted_parent (id serial PRIMARY KEY);
CREATE TABLE pk_noted_child (id serial PRIMARY KEY,
  parent_id int CONSTRAINT fk_noted_parent REFERENCES pk_noted_parent (id));
COMMENT ON CONSTRAINT fk_noted_parent ON pk_noted_child IS 'the parent''s; 100%';
CREATE INDEX ix_noted_parent ON pk_noted_child (parent_id);
COMMENT ON INDEX ix_noted_parent IS 'looked up by parent';
INSERT INTO pk_noted_parent SELECT FROM generate_series(1, 3);
INSERT INTO pk_noted_child (parent_id) SELECT id FROM pk_noted_parent;
"""
_COMMENTS = (
    "SELECT obj_description(c.oid, 'pg_constraint') FROM pg_constraint c "
    "WHERE c.conname = 'fk_noted_parent' UNION ALL "
    "SELECT obj_description('ix_noted_parent'::regclass, 'pg_class')"
)


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    def drop(engine: Engine) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS pk_noted_child, pk_noted_parent")
            conn.exec_driver_sql("DROP TABLE IF EXISTS ulid_key_conversions")

    with private_engine(backends["postgresql"], drop) as engine:
        yield engine


def test_the_comments_of_recreated_foreign_keys_and_indexes_come_back(pg: Engine) -> None:
    """Online as the offline script: the swap drops and recreates them (they were lost)."""
    with pg.begin() as conn:
        conn.exec_driver_sql(_COMMENTED.replace("%", "%%"))
    expected = ["the parent's; 100%", "looked up by parent"]
    for name in ("convert_primary_key_to_ulid", "restore_legacy_primary_key"):
        with pg.connect() as conn:
            context = MigrationContext.configure(conn)
            with context.begin_transaction():
                getattr(Operations(context), name)("pk_noted_parent")
        with pg.connect() as conn:
            assert list(conn.exec_driver_sql(_COMMENTS).scalars()) == expected


_NOT_VALID = """
CREATE TABLE pk_noted_parent (id serial PRIMARY KEY);
CREATE TABLE pk_noted_child (id serial PRIMARY KEY, parent_id int);
INSERT INTO pk_noted_parent SELECT FROM generate_series(1, 3);
INSERT INTO pk_noted_child (parent_id) VALUES (1), (2), ({orphan});
ALTER TABLE pk_noted_child ADD CONSTRAINT fk_noted_parent FOREIGN KEY (parent_id)
  REFERENCES pk_noted_parent (id) NOT VALID;
"""
_COLUMNS = (
    "SELECT attrelid::regclass::text || '.' || attname FROM pg_attribute WHERE attrelid IN "
    "('pk_noted_parent'::regclass, 'pk_noted_child'::regclass) AND attnum > 0 "
    "AND NOT attisdropped ORDER BY 1"
)


def _convert_noted(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction():
            Operations(context).convert_primary_key_to_ulid("pk_noted_parent")


def test_a_not_valid_foreign_key_with_orphans_is_refused_before_any_ddl(pg: Engine) -> None:
    """As the offline script does; online refused in the swap, after the shadow columns."""
    with pg.begin() as conn:
        conn.exec_driver_sql(_NOT_VALID.format(orphan=99))
        before = list(conn.exec_driver_sql(_COLUMNS).scalars())
    with pytest.raises(ConversionRefused, match="fk_noted_parent on pk_noted_child is NOT VALID"):
        _convert_noted(pg)
    with pg.connect() as conn:
        assert list(conn.exec_driver_sql(_COLUMNS).scalars()) == before
        assert not sa.inspect(conn).has_table("ulid_key_conversions")


def test_a_not_valid_foreign_key_comes_back_not_valid(pg: Engine) -> None:
    """As the offline script recreates it from its definition; online validated it."""
    with pg.begin() as conn:
        conn.exec_driver_sql(_NOT_VALID.format(orphan="NULL"))
    _convert_noted(pg)
    with pg.connect() as conn:
        validated = conn.exec_driver_sql(
            "SELECT convalidated FROM pg_constraint WHERE conname = 'fk_noted_parent'"
        ).scalar_one()
    assert validated is False


def test_a_unique_constraint_on_a_referencing_column_comes_back(pg: Engine) -> None:
    """Dropped and added as a constraint: DROP INDEX of its index failed the swap every time."""
    with pg.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE pk_noted_parent (id serial PRIMARY KEY);"
            "CREATE TABLE pk_noted_child (id serial PRIMARY KEY, parent_id int "
            "CONSTRAINT fk_noted_parent REFERENCES pk_noted_parent (id), "
            "CONSTRAINT uq_noted_parent UNIQUE (parent_id));"
            "COMMENT ON CONSTRAINT uq_noted_parent ON pk_noted_child IS 'one each';"
            "INSERT INTO pk_noted_parent SELECT FROM generate_series(1, 3);"
            "INSERT INTO pk_noted_child (parent_id) VALUES (1), (2);"
        )
    _convert_noted(pg)
    with pg.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT pg_get_constraintdef(oid), obj_description(oid, 'pg_constraint') "
            "FROM pg_constraint WHERE conname = 'uq_noted_parent'"
        ).one()
    assert tuple(found) == ("UNIQUE (parent_id)", "one each")


@pytest.fixture
def my(backends: dict[str, Backend]) -> Iterator[Engine]:
    def drop(engine: Engine) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS pk_noted_child, pk_noted_parent")
            conn.exec_driver_sql("DROP TABLE IF EXISTS ulid_key_conversions")

    with private_engine(backends["mysql"], drop) as engine:
        yield engine


def test_an_index_comment_comes_back_on_mariadb(my: Engine) -> None:
    """Part of the index's definition there; the offline script kept it, online lost it."""
    with my.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE pk_noted_parent (id INT AUTO_INCREMENT PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE pk_noted_child (id INT AUTO_INCREMENT PRIMARY KEY, parent_id INT, "
            "INDEX ix_noted_parent (parent_id) COMMENT 'looked up by parent, 100%%', "
            "CONSTRAINT fk_noted_parent FOREIGN KEY (parent_id) REFERENCES pk_noted_parent (id))"
        )
        conn.exec_driver_sql("INSERT INTO pk_noted_parent VALUES (1), (2)")
        conn.exec_driver_sql("INSERT INTO pk_noted_child (parent_id) VALUES (1), (2)")
    _convert_noted(my)
    with my.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT INDEX_COMMENT FROM information_schema.STATISTICS WHERE "
            "TABLE_SCHEMA = DATABASE() AND INDEX_NAME = 'ix_noted_parent'"
        ).scalar_one()
    assert found == "looked up by parent, 100%"
