"""Golden test: the key conversion online sends what the MariaDB script stores, both ways.

``convert_primary_key_to_ulid`` / ``restore_legacy_primary_key`` are run
online, every statement the op sends captured (SQLAlchemy's
``before_cursor_execute``), and the ``--sql`` script's first block is run
on a twin of the same tables: it stores its steps, the statements it will
run, in ``ulid_key_conversions_offline``. The two are compared change by
change:

* each ``ALTER TABLE`` is split into its clauses (the script makes one
  ``ALTER TABLE`` of a table's clauses, the online op one statement per
  clause, so that each is a step with a guard), ``CREATE INDEX`` and ``DROP
  INDEX`` are written as the clauses they are, and the script's ``IF [NOT]
  EXISTS`` (what makes it rerunnable; online, the guards) is left out, as
  is the spelling of a type (``INTEGER(11)`` by SQLAlchemy's compiler,
  ``int(11)`` as ``information_schema`` has it) and of a quote in a comment;
* each ``UPDATE`` that fills a shadow column becomes (the column filled,
  from what): the key's fill is the one step with two bodies (the ids made
  in Python online, in SQL in the script), compared by what it fills;
* the swap's lock: the tables locked, and that the catch-up runs under it.

The same for a referencing column whose shadow's name is over MariaDB's 64
bytes (hashed, online as in the script).

What still differs is pinned below in ``DRIFT``, each item named with its
reason; the test fails on any other difference, and on a pinned one that is
gone (then remove it from ``DRIFT``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sqlalchemy_ulid.alembic._primary_key._offline_mariadb_sql import STEPS_TABLE
from test_alembic_primary_key import TABLES, Interrupted, _check_ulids, _snapshot
from test_alembic_primary_key_offline_mariadb import (
    ORDER_COMMENT,
    _applied,
    _fresh,
    _online,
    _project,
    _schema,
    _script,
    maria,
)

__all__ = ["maria"]

#: A change: (table, what), or ("lock", tables), or ("fill", column, source).
Change = tuple[str, ...]

#: Known drift between the online op and the script, by name: (online only, script only).
DRIFT: dict[str, dict[str, tuple[list[Change], list[Change]]]] = {
    "upgrade": {
        # MariaDB refuses to leave an AUTO_INCREMENT column without a key
        # between two statements: online, where each clause is a statement,
        # the unique key goes on the key column before DROP PRIMARY KEY, and
        # follows it in the rename to legacy_id. The script's one ALTER TABLE
        # adds it on legacy_id. Same name, column and end schema.
        "legacy unique key added before the rename online": (
            [("pk_customers", "ADD CONSTRAINT uq_pk_customers_legacy_id UNIQUE (id)")],
            [("pk_customers", "ADD UNIQUE KEY uq_pk_customers_legacy_id (legacy_id)")],
        ),
    },
    # Undone, both drop the unique key with DROP INDEX after legacy_id is the key again.
    "downgrade": {},
}


def _capture(engine: Engine, config: Any, action: str, revision: str) -> list[str]:
    """Every statement the online op sends, in order."""
    sent: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", listen)
    try:
        _online(config, engine, action, revision)
    finally:
        sa.event.remove(engine, "before_cursor_execute", listen)
    return sent


def _stored(engine: Engine, script: str) -> list[str]:
    """The statements the script's plan block stores, in order (block 2 left out)."""
    cut = script.index(f"-- 2. Run the steps stored in {STEPS_TABLE}")
    end = script.index("DELIMITER ;", cut) + len("DELIMITER ;")
    _applied(engine, script[:cut] + script[end:])
    with engine.begin() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT setup, each_batch, body FROM `{STEPS_TABLE}` WHERE seq > 0 ORDER BY seq"
        ).all()
        conn.exec_driver_sql(f"DROP TABLE `{STEPS_TABLE}`")
    out: list[str] = []
    for setup, each, body in rows:
        for text in (setup, each, body):
            if text is not None:
                out.extend(p for p in text.split("\0") if p)
    return out


def _clauses(text: str) -> list[str]:
    """Split at the commas outside parentheses and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _plain(text: str) -> str:
    text = re.sub(r"\s+", " ", text.replace("`", "")).strip()
    text = re.sub(r" IF (NOT )?EXISTS", "", text)
    text = text.replace("FOREIGN KEY(", "FOREIGN KEY (")
    # A type as SQLAlchemy's compiler writes it (online) and as COLUMN_TYPE
    # reads it (the script): the same type to the server.
    text = re.sub(r"\bINTEGER\(", "int(", text)
    # A comment's quote doubled (the compiler) or escaped (QUOTE()): the same text.
    return text.replace("\\'", "''")


def _changes(statements: list[str], tables: tuple[str, ...] = TABLES) -> list[Change]:
    """What the statements change on ``tables``, one item per clause, in order."""
    names = "|".join(tables)
    out: list[Change] = []
    for raw in statements:
        s = _plain(raw)
        if m := re.match(r"ALTER TABLE (\S+) (.*)$", s):
            if m[1] in tables:
                out.extend((m[1], c.strip()) for c in _clauses(m[2]))
        elif m := re.match(r"CREATE (UNIQUE )?INDEX (\S+) ON (\S+) (\(.*\))$", s):
            out.append((m[3], f"ADD {m[1] or ''}INDEX {m[2]} {m[4]}"))
        elif m := re.match(r"DROP INDEX (\S+) ON (\S+)$", s):
            out.append((m[2], f"DROP INDEX {m[1]}"))
        elif s.startswith("LOCK TABLES"):
            locked = sorted({m[1] for m in re.finditer(r"(\w+) WRITE", s)} & set(tables))
            out.append(("lock", *locked))
        elif m := re.match(rf"UPDATE ({names})\b.* SET (?:\w+\.)?(\w+) ?= ?(\S+)", s):
            source = re.sub(r"^\w+\.", "", m[3].rstrip(","))
            if source.startswith(("%(", "NULL")):
                source = "NULL"  # the catch-up clearing a cleared reference
            elif m[1] == tables[-1] and source in ("ulid", "s.ulid"):
                source = "new ids"  # the key's fill: Python online, SQL in the script
            out.append(("fill", f"{m[1]}.{m[2]}", source))
    # A batch repeats its step's change: one change, however many batches.
    return [c for i, c in enumerate(out) if i == 0 or out[i - 1] != c]


def _diff(online: list[Change], script: list[Change]) -> tuple[list[Change], list[Change]]:
    a, b = Counter(online), Counter(script)
    return sorted((a - b).elements()), sorted((b - a).elements())


def _pinned(action: str, table: str) -> tuple[list[Change], list[Change]]:
    """DRIFT of ``action``, for the key table ``table``: (online only, script only)."""

    def on(changes: list[Change]) -> list[Change]:
        return sorted(tuple(p.replace("pk_customers", table) for p in c) for c in changes)

    drift = DRIFT[action].values()
    return on([c for d in drift for c in d[0]]), on([c for d in drift for c in d[1]])


@pytest.fixture(params=["from_time='created_at'", "batch_size=7"], ids=["from_time", "now"])
def config(maria: Engine, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """The ids dated from a column, or now (in batches of 7: the key's fill repeats)."""
    return _project(tmp_path, maria, extra=request.param)


def _start(maria: Engine, config: Any, action: str) -> None:
    _fresh(maria, config)
    if action == "downgrade":
        _online(config, maria, "upgrade", "pk0001")


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_online_sends_the_scripts_statements(maria: Engine, config: Any, action: str) -> None:
    revision = "pk0001" if action == "upgrade" else "pk0000"
    _start(maria, config, action)
    script = _changes(_stored(maria, _script(config, action)))
    _start(maria, config, action)
    online = _changes(_capture(maria, config, action, revision))

    assert _diff(online, script) == _pinned(action, "pk_customers")

    # The phases in the same order: the shadows added, filled, the tables
    # locked, the catch-up and the swap under the lock.
    def order(changes: list[Change]) -> list[str]:
        kinds = []
        for c in changes:
            kind = "lock" if c[0] == "lock" else "fill" if c[0] == "fill" else "ddl"
            if not kinds or kinds[-1] != kind:
                kinds.append(kind)
        return kinds

    assert order(online) == order(script) == ["ddl", "fill", "lock", "fill", "ddl"]


def test_a_swap_begun_with_a_plain_rename_still_ends_not_null_with_its_comment(
    maria: Engine, tmp_path: Path
) -> None:
    """The NOT NULL and comment steps stay for a swap an earlier release began.

    That release renamed a shadow column in with ``RENAME COLUMN`` (NULL-able,
    no comment) and then made it NOT NULL and gave it its comment, each a
    step. Stopped between, the rerun must do what is left.
    """
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    before = _snapshot(maria)
    _online(config, maria, "upgrade", "pk0001")
    reference = _schema(maria)

    _fresh(maria, config)
    at = "ALTER TABLE pk_orders CHANGE COLUMN customer_id__ulid"

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(at):
            raise Interrupted(at)

    sa.event.listen(maria, "before_cursor_execute", hook)
    try:
        with pytest.raises(Interrupted):
            _online(config, maria, "upgrade", "pk0001")
    finally:
        sa.event.remove(maria, "before_cursor_execute", hook)
    with maria.begin() as conn:  # the earlier release's step
        conn.exec_driver_sql("ALTER TABLE pk_orders RENAME COLUMN customer_id__ulid TO customer_id")
    _online(config, maria, "upgrade", "pk0001")
    assert _schema(maria) == reference
    assert ORDER_COMMENT in [c[4] for c in reference["pk_orders"]["columns"]]
    assert ("customer_id", "BINARY(16)", False) in [
        c[:3] for c in reference["pk_orders"]["columns"]
    ]
    assert _snapshot(maria) == before
    _check_ulids(maria)


#: A key table and a table that references it by a column whose shadow's
#: name is longer than MariaDB's 64 (hashed the same online and in the script).
LONG = "r" * 60 + "_id"
LONG_TABLES = ("pk_long_child", "pk_long_parent")
LONG_SCHEMA = f"""
CREATE TABLE pk_long_parent (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) NOT NULL);
CREATE TABLE pk_long_child (id INT AUTO_INCREMENT PRIMARY KEY, {LONG} INT NOT NULL,
  CONSTRAINT fk_pk_long FOREIGN KEY ({LONG}) REFERENCES pk_long_parent (id));
INSERT INTO pk_long_parent (name) VALUES ('a'), ('b'), ('c');
INSERT INTO pk_long_child ({LONG}) VALUES (1), (2), (3), (3);
"""


def _long_tables(engine: Engine) -> None:
    with engine.begin() as conn:
        for name in LONG_TABLES:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
        for statement in LONG_SCHEMA.split(";"):
            if statement.strip():
                conn.exec_driver_sql(statement)


@pytest.fixture
def long_names(maria: Engine) -> Any:
    yield
    with maria.begin() as conn:
        for name in LONG_TABLES:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.usefixtures("long_names")
def test_long_names_online_as_the_script(maria: Engine, tmp_path: Path) -> None:
    config = _project(tmp_path, maria, table="pk_long_parent")
    for action, revision in (("upgrade", "pk0001"), ("downgrade", "pk0000")):

        def start(action: str) -> None:
            _fresh(maria, config)
            _long_tables(maria)
            if action == "downgrade":
                _online(config, maria, "upgrade", "pk0001")

        start(action)
        script = _changes(_stored(maria, _script(config, action)), LONG_TABLES)
        start(action)
        online = _changes(_capture(maria, config, action, revision), LONG_TABLES)
        assert len(online) > 8
        added = next(c[1] for c in online if c[0] == "pk_long_child" and "ADD COLUMN" in c[1])
        shadow = added.split()[2]
        assert len(shadow) <= 64, shadow
        assert not shadow.startswith(LONG + "__"), shadow  # hashed
        assert _diff(online, script) == _pinned(action, "pk_long_parent")
