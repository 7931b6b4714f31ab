"""``add_ulid_column(..., online=True)`` in offline (``--sql``) mode, on PostgreSQL.

(MariaDB's script is written by ``_offline_mariadb``; the checks of the op
below are shared.)

The script gets the online op's phases in order, each statement on its
own outside a transaction (Alembic's ``autocommit_block()`` writes the
``COMMIT`` before them and the ``BEGIN`` after). The backfill is one ``DO``
block that runs the batch statement until it fills no row, committing
after each batch (PostgreSQL 11+ allows ``COMMIT`` in a ``DO`` block run
outside a transaction, as ``psql`` runs a script). The block finds the
table's primary key in the catalog, so the script needs no database to be
written.

A first ``DO`` block checks the table before any change: a single-column
primary key, and a time column that is a timestamp or an integer of Unix
milliseconds (a ``date``, a float or a ``numeric`` would date ids wrongly;
online refuses them too). Names go into the SQL quoted, and escaped again
where they sit in a ``format()`` template or a string literal.

The ids: the time part is the row's time, exactly (``floor(epoch * 1000)``,
a timestamp without time zone read as UTC), and a time before 1970, past
the ULID range or NULL fails the batch, naming the value: nothing is
stored. Rows sharing a millisecond are numbered in key order within a batch
(a 16-bit rank, then 64 random bits).
"""

from __future__ import annotations

from datetime import timedelta
from datetime import timezone as _timezone
from typing import TYPE_CHECKING

from alembic.operations import Operations
from alembic.util import CommandError

from .._dialects import dialect_row
from .._types import ULIDType
from ._inspect import quote, safe_name
from ._locks import DEFAULT_LOCK_TIMEOUT
from ._offline_mariadb import add_offline_mariadb

if TYPE_CHECKING:
    from ._add import AddULIDColumnOp

__all__ = ["add_offline"]

#: Rows one batch may give ids to: the tie rank has 16 bits.
_MAX_BATCH = 65_535

_ULID_UUID = (
    "encode(substring(int8send(b.ms) FROM 3) || substring(int4send(b.rank::int) FROM 3)"
    " || substring(uuid_send(gen_random_uuid()) FROM 1 FOR 8), 'hex')::uuid"
)
_ULID_BYTEA = (
    "substring(int8send(b.ms) FROM 3) || substring(int4send(b.rank::int) FROM 3)"
    " || substring(uuid_send(gen_random_uuid()) FROM 1 FOR 8)"
)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def add_offline(operations: Operations, op: AddULIDColumnOp) -> None:
    """Write the online op's phases into the ``--sql`` script."""
    context = operations.get_context()
    dialect = context.dialect
    if not op.offline_script:
        raise CommandError(
            f"{op.op_name}(online=True) has no offline (--sql) script; run this "
            "migration online (alembic upgrade without --sql)"
        )
    if dialect.name not in ("postgresql", "mysql", "mariadb"):
        raise CommandError(
            f"add_ulid_column(online=True) writes an offline (--sql) script for "
            f"PostgreSQL and MariaDB only; on {dialect.name} run this migration online "
            "(alembic upgrade without --sql)"
        )
    kind = dialect_row(dialect).kind(op.storage)
    if kind not in (("uuid", "binary") if dialect.name == "postgresql" else ("binary",)):
        raise CommandError(
            "add_ulid_column(online=True) offline needs "
            + ("uuid or binary" if dialect.name == "postgresql" else "binary")
            + f" storage, not {op.storage!r}"
        )
    zone = op.timezone
    if not (isinstance(zone, _timezone) and zone.utcoffset(None) == timedelta(0)):
        raise CommandError(
            "add_ulid_column(online=True) offline reads naive times as UTC only: the "
            f"database would place them in {zone} by its own rules, not ours"
        )
    if op.batch_size > _MAX_BATCH:
        raise ValueError(f"offline, batch_size is at most {_MAX_BATCH}, got {op.batch_size}")
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
    out = context.impl.static_output
    if dialect.name != "postgresql":
        # Outside the migration's transaction, if env.py made one (the
        # statements commit on their own, as MariaDB's DDL does anyway).
        with context.autocommit_block():
            add_offline_mariadb(context, op, timeout, out)
        return
    table = quote(dialect, op.table_name, op.schema)
    column = quote(dialect, op.column_name)
    when = quote(dialect, op.from_column)
    type_sql = ULIDType(op.storage).load_dialect_impl(dialect).compile(dialect=dialect)
    constraint_name = op.constraint_name or safe_name(
        f"uq_{op.table_name}_{op.column_name}", dialect
    )
    check_name = safe_name(f"ck_{op.table_name}_{op.column_name}_not_null", dialect)
    with context.autocommit_block():
        out(
            f"-- add_ulid_column({_comment(op.table_name)}.{_comment(op.column_name)}, "
            "online=True): each "
            "statement below commits on its own (run them outside a transaction, as psql "
            "does). If one fails with 'canceling statement due to lock timeout', run it "
            "again and go on from there."
        )
        # Without it psql would go on past the check block's refusal.
        out("\\set ON_ERROR_STOP on")
        out(f"SET lock_timeout = '{max(1, round(timeout * 1000))}ms';")
        out(_check_block(op, table))
        out(f"-- Phase 1: the column, nullable (no table rewrite)\nALTER TABLE {table} "
            f"ADD COLUMN IF NOT EXISTS {column} {type_sql};")  # fmt: skip
        if op.server_default:
            server = dialect_row(dialect).server
            assert server is not None
            out(
                f"-- New rows get ids from the database from here on\nALTER TABLE {table} "
                f"ALTER COLUMN {column} SET DEFAULT {server.default[kind]};"
            )
        out(_backfill_block(op, table, column, when, kind))
        out(_not_null_steps(op, table, column, (check_name, quote(dialect, check_name))))
        if op.unique:
            out(
                _unique_steps(
                    table,
                    column,
                    constraint_name,
                    quote(dialect, constraint_name),
                    quote(dialect, constraint_name, op.schema),
                )
            )
        out("RESET lock_timeout;")


def _not_null_steps(op: AddULIDColumnOp, table: str, column: str, names: tuple[str, str]) -> str:
    """Phase 3, each statement guarded by the catalog: a rerun skips what is done."""
    table_lit, column_lit = _literal(table), _literal(op.column_name)
    check_lit, check = _literal(names[0]), names[1]
    nullable = (
        f"EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = {table_lit}::regclass "
        f"AND attname = {column_lit} AND attnum > 0 AND NOT attisdropped AND NOT attnotnull)"
    )
    has_check = (
        f"EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = {table_lit}::regclass "
        f"AND conname = {check_lit} AND contype = 'c')"
    )
    body = f"""
BEGIN
  IF {nullable} AND NOT {has_check} THEN
    ALTER TABLE {table} ADD CONSTRAINT {check} CHECK ({column} IS NOT NULL) NOT VALID;
  END IF;
END
"""
    validate = f"""
BEGIN
  IF {nullable} AND {has_check} THEN
    ALTER TABLE {table} VALIDATE CONSTRAINT {check};
  END IF;
END
"""
    set_not_null = f"""
BEGIN
  IF {nullable} THEN
    ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL;
  END IF;
END
"""
    return (
        "-- Phase 3: NOT NULL without a long lock. If VALIDATE fails, rows were "
        f"written without {_comment(op.column_name)}: run the DO block above again, then "
        "this phase. Each block does nothing once its step is done\n"
        f"DO {_dollar_quoted('ulid', body)};\n"
        f"DO {_dollar_quoted('ulid', validate)};\n"
        f"DO {_dollar_quoted('ulid', set_not_null)};\n"
        f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {check};"
    )


def _unique_steps(table: str, column: str, name: str, constraint: str, qualified: str) -> str:
    r"""Phase 4: the unique index built concurrently, then the constraint on it.

    psql's ``\gexec`` drops an INVALID leftover of an interrupted build first;
    the constraint is added unless it exists.
    """
    table_lit = _literal(table)
    name_lit = _literal(name)
    add = f"""
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = {table_lit}::regclass
      AND conname = {name_lit}) THEN
    ALTER TABLE {table} ADD CONSTRAINT {constraint} UNIQUE USING INDEX {constraint};
  END IF;
END
"""
    return (
        "-- Phase 4: the unique index, built while writers go on (an INVALID index left by "
        "an interrupted build is dropped first), then the constraint on it\n"
        f"SELECT {_literal('DROP INDEX CONCURRENTLY IF EXISTS ' + qualified)} "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        f"WHERE x.indrelid = {table_lit}::regclass AND i.relname = {name_lit} "
        "AND NOT x.indisvalid \\gexec\n"
        f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {constraint} ON {table} ({column});\n"
        f"DO {_dollar_quoted('ulid', add)};"
    )


def _dollar_quoted(tag: str, body: str) -> str:
    """``body`` as a dollar-quoted string whose tag does not occur in it."""
    while f"${tag}$" in body:
        tag += "_"
    return f"${tag}${body}${tag}$"


def _comment(text: str) -> str:
    """Text for a ``--`` comment line: a line break in a name must not end it."""
    return text.replace("\r", " ").replace("\n", " ")


#: The time column's type -> the SQL of its Unix milliseconds (%I: its name).
#: Integers are taken as milliseconds, as online; a timestamp without time
#: zone is read as UTC. Any other type (a date, a float or numeric of epoch
#: seconds) is refused, as online: it would date ids wrongly.
_MILLIS_BY_TYPE = (
    "CASE WHEN a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) "
    "THEN format('%I::bigint', a.attname) "
    "WHEN a.atttypid IN ('timestamp'::regtype, 'timestamptz'::regtype) "
    "THEN format('floor(extract(epoch FROM %I) * 1000)::bigint', a.attname) END"
)


def _lookups(op: AddULIDColumnOp, name: str) -> str:
    """PL/pgSQL that sets key_column and millis, or raises naming what is wrong."""
    time_column = _literal(op.from_column)
    return f"""\
  SELECT a.attname INTO key_column FROM pg_index i
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
    WHERE i.indrelid = {name}::regclass AND i.indisprimary AND i.indnkeyatts = 1;
  IF key_column IS NULL THEN
    RAISE EXCEPTION 'add_ulid_column: % needs a single-column primary key', {name};
  END IF;
  SELECT format_type(a.atttypid, a.atttypmod), {_MILLIS_BY_TYPE}
    INTO time_type, millis FROM pg_attribute a
    WHERE a.attrelid = {name}::regclass AND a.attname = {time_column}
    AND a.attnum > 0 AND NOT a.attisdropped;
  IF time_type IS NULL THEN
    RAISE EXCEPTION 'add_ulid_column: % has no column %', {name}, {time_column};
  END IF;
  IF millis IS NULL THEN
    RAISE EXCEPTION 'add_ulid_column: %.% is %, not a timestamp or an integer of Unix milliseconds',
      {name}, {time_column}, time_type;
  END IF;"""


def _declarations() -> str:
    return "  key_column name;\n  time_type text;\n  millis text;\n"


def _check_block(op: AddULIDColumnOp, table: str) -> str:
    """A DO block that stops the script before any change, on a table it cannot fill."""
    body = f"""
DECLARE
{_declarations()}BEGIN
{_lookups(op, _literal(table))}
END
"""
    return (
        "-- The table's primary key and time column, checked before any change\n"
        f"DO {_dollar_quoted('ulid', body)};"
    )


def _backfill_block(op: AddULIDColumnOp, table: str, column: str, when: str, kind: str) -> str:
    ulid = _ULID_UUID if kind == "uuid" else _ULID_BYTEA
    # The batch is a format() template: a % of a name or of the message is
    # doubled there; %1$I is the key column, %2$s the row's milliseconds.
    out_of_range = _literal(
        f"add_ulid_column: {op.table_name}.{op.from_column} is out of the ULID range "
        "(1970 to 10889) or NULL: "
    ).replace("%", "%%")
    table_f, column_f, when_f = (name.replace("%", "%%") for name in (table, column, when))
    batch = (
        f"UPDATE {table_f} AS t SET {column_f} = s.ulid FROM ("
        f"SELECT b.k, {ulid} AS ulid FROM ("
        "SELECT c.k, c.ms, row_number() OVER (PARTITION BY c.ms ORDER BY c.k) AS rank FROM ("
        "SELECT r.k, CASE WHEN r.m BETWEEN 0 AND 281474976710655 THEN r.m ELSE "
        f"({out_of_range} || coalesce(r.v::text, 'NULL'))::bigint END AS ms "
        f"FROM (SELECT %1$I AS k, {when_f} AS v, %2$s AS m FROM {table_f} "
        f"WHERE {column_f} IS NULL ORDER BY %1$I LIMIT {op.batch_size}) AS r"
        ") AS c) AS b) AS s "
        f"WHERE t.%1$I = s.k AND t.{column_f} IS NULL"
    )
    pause = f"\n    PERFORM pg_sleep({op.pause:g});" if op.pause else ""
    filled_name = _literal(f"{op.table_name}.{op.column_name}")
    body = f"""
DECLARE
{_declarations()}  filled bigint;
  total bigint := 0;
BEGIN
{_lookups(op, _literal(table))}
  LOOP
    EXECUTE format({_dollar_quoted("batch", batch)}, key_column, millis);
    GET DIAGNOSTICS filled = ROW_COUNT;
    EXIT WHEN filled = 0;
    total := total + filled;
    RAISE NOTICE 'add_ulid_column: % rows of % filled', total, {filled_name};
    COMMIT;{pause}
  END LOOP;
END
"""
    return f"""\
-- Phase 2: the backfill, {op.batch_size} rows a transaction, in key order. This block
-- runs the batch UPDATE (the EXECUTE below) until it fills no row, and commits after
-- each batch; run it again after an interruption: it goes on where it stopped.
DO {_dollar_quoted("ulid", body)};"""
