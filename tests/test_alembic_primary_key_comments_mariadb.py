"""MariaDB: a key conversion and its reverse keep every comment, online and in the script.

An index's comment is part of its definition there: the primary keys, the
unique key and the index the swap drops and creates again must come back
with theirs, and the changing columns with their comments, after
``op.convert_primary_key_to_ulid`` and after ``op.restore_legacy_primary_key``,
run online and by the ``--sql`` script applied with the ``mariadb`` client.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from test_alembic_primary_key import TABLES
from test_alembic_primary_key_offline_mariadb import (
    _applied,
    _fresh,
    _online,
    _project,
    _script,
    maria,  # noqa: F401  (the fixture)
)

#: (table, index, its columns, unique, comment): each index the swap drops and creates again
INDEXES = [
    ("pk_customers", "PRIMARY", "id", True, "the customer's key"),
    ("pk_accounts", "PRIMARY", "customer_id", True, "one account a customer"),
    ("pk_orders", "uq_pk_orders_customer_id", "customer_id, id", True, "an order once"),
    ("pk_orders", "ix_pk_orders_customer_note", "customer_id, note", False, "by customer"),
    ("pk_account_events", "ix_pk_account_events_account_id", "account_id", False, "by account"),
]

#: (table, column, its definition without the comment, comment)
COLUMNS = [
    ("pk_customers", "id", "INT NOT NULL AUTO_INCREMENT", "the key \\ it's old"),
    ("pk_customers", "referrer_id", "INT NULL", "who sent them"),
    ("pk_accounts", "customer_id", "INT NOT NULL", "whose account"),
    ("pk_account_events", "account_id", "INT NOT NULL", "the account"),
]


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _comment_everything(engine: Engine) -> None:
    with engine.begin() as conn:
        for table, name, columns, unique, comment in INDEXES:
            if name == "PRIMARY":
                change = f"DROP PRIMARY KEY, ADD PRIMARY KEY ({columns})"
            elif unique:  # a new one
                change = f"ADD UNIQUE KEY {name} ({columns})"
            else:
                change = f"DROP KEY {name}, ADD KEY {name} ({columns})"
            conn.exec_driver_sql(f"ALTER TABLE {table} {change} COMMENT {_literal(comment)}")
        for table, column, definition, comment in COLUMNS:
            conn.exec_driver_sql(
                f"ALTER TABLE {table} MODIFY {column} {definition} COMMENT {_literal(comment)}"
            )


def _comments(engine: Engine) -> dict[str, str]:
    """Every non-empty comment on the tables' columns and indexes, by ``table.name``."""
    names = ", ".join(_literal(t) for t in TABLES)
    with engine.connect() as conn:
        columns = conn.exec_driver_sql(
            "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_COMMENT FROM information_schema.COLUMNS "
            f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({names}) AND COLUMN_COMMENT <> ''"
        ).all()
        indexes = conn.exec_driver_sql(
            "SELECT DISTINCT TABLE_NAME, INDEX_NAME, INDEX_COMMENT "
            "FROM information_schema.STATISTICS WHERE"
            f" TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({names}) AND INDEX_COMMENT <> ''"
        ).all()
    found = {f"{t}.{c}": str(text) for t, c, text in columns}
    found.update({f"{t} index {i}": str(text) for t, i, text in indexes})
    return found


@pytest.mark.parametrize("mode", ["online", "script"])
def test_every_comment_survives_the_round_trip(
    maria: Engine,  # noqa: F811
    tmp_path: Path,
    mode: str,
) -> None:
    config = _project(tmp_path, maria)
    _fresh(maria, config)
    _comment_everything(maria)
    before = _comments(maria)
    assert len(before) == len(INDEXES) + len(COLUMNS) + 1  # and pk_orders.customer_id's

    def run(action: str) -> None:
        if mode == "online":
            _online(config, maria, action, "pk0001" if action == "upgrade" else "pk0000")
        else:
            _applied(maria, _script(config, action))

    run("upgrade")
    # The key's comment stays with the old values, on legacy_id.
    expected = {k: v for k, v in before.items() if k != "pk_customers.id"}
    expected["pk_customers.legacy_id"] = before["pk_customers.id"]
    assert _comments(maria) == expected
    run("downgrade")
    assert _comments(maria) == before
