"""Golden: the storage ops' refusals on MariaDB are one SQL, online and in the script.

``alter_ulid_storage`` / ``alter_uuid7_storage``, one transaction and
``online=True`` (the shadow table), both directions: the checks the online
op asks (``SELECT CASE WHEN <guard> THEN <message> END``, recorded as sent)
equal, in order, the ``IF (<guard>) THEN SIGNAL <message>`` of the
``--sql`` script's check block. Then each refuses the same case the same
way: online with the message the script's ``SIGNAL`` shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _clients import mariadb
from _offline_scripts import op_sql, run_online
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid import ULID

TABLE = "golden_st"
ROWS = 6
_CHECK = re.compile(r"^  IF \((.*)\) THEN\n    SET message = LEFT\((.*), 512\);$", re.MULTILINE)

#: (op, key kind's text, the other storage)
OPS = [
    ("alter_ulid_storage", "ulid", "binary"),
    ("alter_uuid7_storage", "uuid7", "binary"),
]


_drop = _databases.dropper(TABLE, conversions=[TABLE])


@pytest.fixture
def server(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


def _texts(kind: str) -> list[str]:
    ids = [ULID.from_bytes(bytes([1, i]) + bytes(14)) for i in range(ROWS)]
    if kind == "ulid":
        return [str(u) for u in ids]
    return [f"0189{i:04x}-ac96-7{i:03x}-bcce-b302099a8057" for i in range(ROWS)]


def _create(engine: Engine, kind: str) -> None:
    width = 26 if kind == "ulid" else 36
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, ref CHAR({width}) NOT NULL "
            "COMMENT 'the ref', n INT) ENGINE=InnoDB"
        )
        for i, text in enumerate(_texts(kind)):
            conn.exec_driver_sql(f"INSERT INTO {TABLE} VALUES ({i}, '{text}', {i})")


def _call(op: str, online: bool, reverse: bool = False) -> dict[str, Any]:
    storages = ("binary", "text") if reverse else ("text", "binary")
    options: dict[str, Any] = {"online": True} if online else {"nullable": False}
    return {"from_storage": storages[0], "to_storage": storages[1], **options}


def _script(op: str, **options: Any) -> str:
    return op_sql("mysql", lambda ops: getattr(ops, op)(TABLE, "ref", **options))


def _rendered_checks(script: str) -> list[str]:
    return [
        f"SELECT CASE WHEN {guard} THEN {message} END" for guard, message in _CHECK.findall(script)
    ]


def _online(engine: Engine, op: str, **options: Any) -> list[str]:
    with recording(engine) as seen:
        run_online(engine, lambda ops: getattr(ops, op)(TABLE, "ref", **options))
    # The checks (a step's guard, asked as it runs, is "... THEN 1 ELSE 0 END").
    return [
        s.replace("%%", "%")
        for s in seen
        if s.startswith("SELECT CASE WHEN ") and not s.endswith(" THEN 1 ELSE 0 END")
    ]


@pytest.mark.parametrize("online", [False, True], ids=["one transaction", "online"])
@pytest.mark.parametrize(("op", "kind", "storage"), OPS, ids=[op for op, _, _ in OPS])
def test_the_online_checks_are_the_scripts(
    server: Engine, op: str, kind: str, storage: str, online: bool
) -> None:
    _create(server, kind)
    options = _call(op, online)
    rendered = _rendered_checks(_script(op, **options))
    assert len(rendered) >= 6
    assert _online(server, op, **options) == rendered
    # And back: the other direction's checks, asked against the converted column.
    back = _call(op, online, reverse=True)
    assert _online(server, op, **back) == _rendered_checks(_script(op, **back))


#: A case each op refuses, set up by SQL, and what the refusal says.
REFUSALS = {
    "neither storage": ([f"DELETE FROM {TABLE}",
                         f"ALTER TABLE {TABLE} MODIFY ref DATETIME NOT NULL"], "is neither text"),
    "default": ([f"ALTER TABLE {TABLE} ALTER COLUMN ref SET DEFAULT 'nope'"], "has DEFAULT 'nope'"),
    # 'U' is not in Crockford's alphabet
    "not an id": ([f"UPDATE {TABLE} SET ref = REPEAT('U', 26) WHERE id = 2"],
                  "holds values that are not ULIDs (e.g. UUUU"),
}  # fmt: skip


@pytest.mark.parametrize("online", [False, True], ids=["one transaction", "online"])
@pytest.mark.parametrize("case", list(REFUSALS))
def test_online_and_script_refuse_with_one_message(server: Engine, case: str, online: bool) -> None:
    op = "alter_ulid_storage"
    _create(server, "ulid")
    setup, says = REFUSALS[case]
    with server.begin() as conn:
        for statement in setup:
            conn.exec_driver_sql(statement)
    options = _call(op, online)
    done = mariadb(server, _script(op, **options))
    assert done.returncode != 0
    assert "ERROR 1644 (45000)" in done.stderr, done.stderr
    [shown] = re.findall(r"^ERROR 1644 \(45000\) at line \d+: (.*)$", done.stderr, re.MULTILINE)
    assert says in shown
    with pytest.raises(ValueError, match=re.escape(says)) as refused:
        _online(server, op, **options)
    assert str(refused.value) == shown
