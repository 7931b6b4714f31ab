"""The dialect rows and the key kinds: lookups, refusals, and the kinds' round trips."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.engine.default import DefaultDialect

from sqlalchemy_ulid import (
    ULID,
    InvalidULID,
    SettleError,
    ULIDType,
    partition_ddl,
    ulid_function_ddl,
    ulid_timestamp,
    uuid7_function_ddl,
)
from sqlalchemy_ulid._dialects import DialectRow, all_rows, dialect_row
from sqlalchemy_ulid._keys import keys_of
from sqlalchemy_ulid._kinds import KEY_KINDS, ULID_KEYS, UUID7_KEYS, key_kind, kind_of_type
from sqlalchemy_ulid._settle import plan_horizon
from sqlalchemy_ulid._typeid_type import TypeIDType


class _Unknown(DefaultDialect):
    name = "unknowndb"


class _PostgresqlFork(PGDialect):
    name = "pgfork"


events = sa.Table("events", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))


def test_mariadb_and_mysql_rows_differ_only_in_isolation_rules() -> None:
    plain = mysql.dialect()
    maria = mysql.dialect()
    maria.is_mariadb = True  # what a connection to MariaDB sets
    mysql_row, mariadb_row = dialect_row(plain), dialect_row(maria)
    assert mysql_row.settle is not None
    assert mariadb_row.settle is not None
    assert "@@transaction_isolation" in mysql_row.settle.isolation
    assert "@@in_transaction" in mariadb_row.settle.isolation
    assert mariadb_row.settle.fresh_levels == {"repeatable read"}
    assert not mysql_row.settle.fresh_levels
    assert dialect_row("mariadb") is mariadb_row
    assert dialect_row("mysql") is mysql_row
    # everything else is one row
    assert mysql_row.binary is mariadb_row.binary
    assert ULID_KEYS.generator(mysql_row) is ULID_KEYS.generator(mariadb_row)
    assert mysql_row.paging == mariadb_row.paging


def test_an_unknown_dialect_stores_keys_and_refuses_the_rest_before_any_sql() -> None:
    dialect = _Unknown()
    row = dialect_row(dialect)
    assert row.kind("auto") == "binary"
    assert row.settle is None
    assert row.clock_us is None
    with pytest.raises(SettleError, match="settle= is not supported on unknowndb"):
        plan_horizon(timedelta(seconds=1), timedelta(seconds=1), dialect, events.c.id)
    with pytest.raises(NotImplementedError, match="no server-side ULID generator for 'unknowndb'"):
        ulid_function_ddl(dialect)
    with pytest.raises(NotImplementedError, match="no server-side UUIDv7 generator"):
        uuid7_function_ddl(dialect)
    with pytest.raises(sa.exc.CompileError, match="no SQL for the unknowndb dialect"):
        sa.select(ulid_timestamp(events.c.id)).compile(dialect=dialect)
    with pytest.raises(ValueError, match="time partitions are a PostgreSQL feature"):
        partition_ddl(events.c.id, "2024-01-01", "2024-01-02", dialect=dialect)  # type: ignore[arg-type]


def test_a_postgresql_based_dialect_of_its_own_name_gets_partitions_only() -> None:
    row = dialect_row(_PostgresqlFork())
    assert row.range_partitions
    assert row.settle is None
    assert row.keys == {}
    assert row.time is None


@pytest.mark.parametrize(
    ("dialect", "has_settle", "per_connection"),
    [
        (postgresql.dialect(), True, False),
        (mysql.dialect(), True, False),
        (sqlite.dialect(), True, True),
    ],
)
def test_the_three_servers_rows(dialect: Any, has_settle: bool, per_connection: bool) -> None:
    row = dialect_row(dialect)
    assert (row.settle is not None) is has_settle
    assert row.clock_us is not None
    assert row.functions_per_connection is per_connection


def test_key_kinds_by_name() -> None:
    assert key_kind("ulid") is ULID_KEYS
    assert key_kind("uuid") is UUID7_KEYS
    assert set(KEY_KINDS) == {"ulid", "uuid", "typeid"}
    with pytest.raises(ValueError, match="unknown key kind 'ksuid'"):
        key_kind("ksuid")
    # The typed ids are one kind, parameterized by the prefix.
    user = key_kind("typeid", "user")
    assert user is key_kind("typeid", "user")
    assert user.prefix == "user"
    assert user.with_prefix("user") is user
    assert user.with_prefix("") is KEY_KINDS["typeid"]
    with pytest.raises(ValueError, match="ULID keys have no prefix"):
        key_kind("ulid", "user")


def test_a_key_kind_adds_no_row_field() -> None:
    # A kind's SQL is an entry of DialectRow.keys, by the kind's name: no field names a kind.
    mentions = {
        word
        for kind in KEY_KINDS.values()
        for word in (kind.name, kind.label.lower(), kind.function_name.removeprefix("gen_"))
    }
    assert mentions == {"ulid", "uuid", "uuid7", "uuidv7", "typeid"}
    named = [
        (field.name, word)
        for field in dataclasses.fields(DialectRow)
        for word in mentions
        if word in field.name
    ]
    assert named == [], f"DialectRow fields name a key kind: {named}"
    # Every entry is a kind's, and every kind's SQL is looked up by a kind's name.
    assert {name for row in all_rows() for name in row.keys} == {"ulid", "uuid"}
    for kind in KEY_KINDS.values():
        assert {kind.generator_of or kind.name, kind.convert_of or kind.name} <= set(KEY_KINDS)
    postgresql_row = dialect_row("postgresql")
    assert KEY_KINDS["typeid"].generator(postgresql_row) is UUID7_KEYS.generator(postgresql_row)
    assert KEY_KINDS["typeid"].convert(postgresql_row) is ULID_KEYS.convert(postgresql_row)
    assert ULID_KEYS.generator(dialect_row("mssql")) is None


@pytest.mark.parametrize(
    ("type_", "kind", "prefix"),
    [
        (ULIDType(), "ulid", ""),
        (ULIDType("text"), "ulid", ""),
        (TypeIDType("user"), "typeid", "user"),  # a ULIDType too: typed ids are asked first
        (sa.Uuid(), "uuid", ""),
        (sa.Uuid(as_uuid=False), "uuid", ""),
        (sa.Integer(), None, ""),  # not a key type
    ],
)
def test_a_column_type_names_its_kind(type_: Any, kind: str | None, prefix: str) -> None:
    found = kind_of_type(type_)
    assert (found and found.name) == kind
    assert (found.prefix if found else "") == prefix
    # keys_of() asks the kinds; any other type holds ULIDs, as before.
    assert keys_of(type_).key_kind is key_kind(kind or "ulid", prefix)


@given(st.integers(min_value=0, max_value=(1 << 128) - 1))
def test_every_kind_formats_and_parses_back(number: int) -> None:
    ulid = ULID.from_int(number)
    assert ULID_KEYS.parse(ULID_KEYS.format(ulid)) == ulid
    assert ULID_KEYS.format(ulid.bytes) == str(ulid)
    value = uuid.UUID(int=number)
    assert UUID7_KEYS.parse(UUID7_KEYS.format(value)) == value
    assert UUID7_KEYS.format(value.bytes) == str(value)
    assert UUID7_KEYS.parse(str(value).upper()) == value


@given(st.integers(min_value=0, max_value=(1 << 48) - 1), st.data())
def test_every_key_of_a_millisecond_lies_within_its_bounds(ms: int, data: st.DataObject) -> None:
    tail = data.draw(st.integers(min_value=0, max_value=(1 << 80) - 1))
    ulid = ULID.from_int((ms << 80) | tail)
    assert ULID_KEYS.min_at(ms) <= ulid <= ULID_KEYS.max_at(ms)
    # a UUIDv7 of that millisecond: version 7 and the variant set
    rand_a = data.draw(st.integers(min_value=0, max_value=(1 << 12) - 1))
    rand_b = data.draw(st.integers(min_value=0, max_value=(1 << 62) - 1))
    u7 = uuid.UUID(int=(ms << 80) | (7 << 76) | (rand_a << 64) | (2 << 62) | rand_b)
    assert UUID7_KEYS.min_at(ms).bytes <= u7.bytes <= UUID7_KEYS.max_at(ms).bytes


@pytest.mark.parametrize(
    ("kind", "bad", "error"),
    [
        (ULID_KEYS, "01HTQW311N1KR5G0Y75M3EF00", InvalidULID),  # 25 characters
        (ULID_KEYS, b"\x00" * 16, TypeError),  # bytes are never a cursor
        (UUID7_KEYS, "018eafc184357000800000000000000", InvalidULID),  # no dashes, 31 digits
        (UUID7_KEYS, 7, TypeError),  # an int names no key
    ],
)
def test_parse_refuses(kind: Any, bad: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        kind.parse(bad)


def test_the_mixin_column_of_each_kind() -> None:
    for kind, type_ in ((ULID_KEYS, ULIDType), (UUID7_KEYS, sa.Uuid)):
        column = kind.primary_key()
        assert isinstance(column.column.type, type_)
        assert column.column.primary_key
        assert column.column.default.arg.__name__ == kind.new.__name__


def test_only_mariadb_has_its_own_uuid7_function() -> None:
    plain = mysql.dialect()
    plain.server_version_info = (11, 8, 2)  # a MariaDB version number, but a MySQL server
    maria = mysql.dialect()
    maria.is_mariadb = True
    maria.server_version_info = (11, 8, 2)
    mysql_uuid7 = UUID7_KEYS.generator(dialect_row(plain))
    mariadb_uuid7 = UUID7_KEYS.generator(dialect_row(maria))
    assert mysql_uuid7 is not None
    assert mariadb_uuid7 is not None
    assert not mysql_uuid7.has_builtin(plain)
    assert mariadb_uuid7.has_builtin(maria)
    assert mariadb_uuid7.builtin == {"uuid": "UUID_v7()"}
    old = mysql.dialect()
    old.is_mariadb = True
    old.server_version_info = (10, 6, 18)
    old_uuid7 = UUID7_KEYS.generator(dialect_row(old))
    assert "RANDOM_BYTES" in (old_uuid7.missing(old) or "")  # type: ignore[union-attr]
    assert mysql_uuid7.missing(old) is None
