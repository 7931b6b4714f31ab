"""The one-transaction ``alter_ulid_storage`` / ``alter_uuid7_storage`` as a MariaDB script.

The online op (``_op._convert``) runs ``MODIFY`` to the holding
``VARBINARY``, one ``UPDATE``, ``MODIFY`` to the final type, after reading
the column. The script cannot read it when it is written, so each of its
three blocks reads ``information_schema`` as it runs and does only what is
left, guarded by the column's type as found:

0. the checks (:mod:`..mysql.storage_checks`), the refusals of the online
   op, before any change;
1. the first ``MODIFY``, while the column is in the old storage, keeping
   the column's DEFAULT and COMMENT as found;
2. the ``UPDATE``, while the column is the holding ``VARBINARY`` and holds
   no converted value yet (one statement: the values are all old or all
   new);
3. the final ``MODIFY``, while the column is the holding ``VARBINARY``,
   with the DEFAULT converted as the online op converts it and the COMMENT.

So the script run again after it finished does nothing, and run again after
a stop at any statement goes on from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic.operations import Operations
from sqlalchemy.engine import Connection

from ..._convert_sql import ConvertSQL
from .._plan.render_mariadb import checks_block, comment, compound, lit
from .._plan.run import run_checks
from ..mysql.storage_checks import column_kind, one_transaction_checks
from ..mysql.storage_target import DEFAULT_DECLARATIONS, Names, new_default

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["alter_in_place_script", "refuse_in_place"]

#: What the script's session changes, saved in user variables and restored.
_SAVED = (
    ("sql_mode", "@sqlalchemy_ulid_sql_mode"),
    ("max_statement_time", "@sqlalchemy_ulid_statement_time"),
)


def refuse_in_place(
    connection: Connection, op: AlterULIDStorageOp, sql: ConvertSQL, from_kind: str, to_kind: str
) -> None:
    """Online, the script's checks: refuse from the same SQL, before any change."""
    run_checks(
        connection, one_transaction_checks(Names(connection.dialect, op, sql, from_kind, to_kind))
    )


def alter_in_place_script(
    operations: Operations, op: AlterULIDStorageOp, sql: ConvertSQL, from_kind: str, to_kind: str
) -> None:
    """Write the guarded blocks (see the module docstring) into the ``--sql`` script."""
    context = operations.get_context()
    dialect = context.dialect
    n = Names(dialect, op, sql, from_kind, to_kind)
    assert sql.holding is not None
    assert op.nullable is not None
    holding = sql.holding().compile(dialect=dialect)
    null = "NULL" if op.nullable else "NOT NULL"
    kind = column_kind(n)
    found = (
        f"  SELECT {kind}, COLUMN_DEFAULT, COLUMN_COMMENT INTO v_kind, v_old_default, v_comment\n"
        f"    FROM information_schema.COLUMNS WHERE {n.where(n.name)} "
        f"AND COLUMN_NAME = {n.column_lit};\n"
    )
    declare = (
        "  DECLARE v_kind VARCHAR(16) CHARACTER SET utf8mb4;\n"
        "  DECLARE v_comment TEXT CHARACTER SET utf8mb4;\n"
        "  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;\n" + DEFAULT_DECLARATIONS
    )
    comment_clause = "IF(v_comment = '', '', CONCAT(' COMMENT ', QUOTE(v_comment)))"
    modify = lit(f"ALTER TABLE {n.table} MODIFY {n.column} ")
    label = comment(f"{op.op_name}({op.table_name}.{op.column_name})")
    out = context.impl.static_output
    saved = ", ".join(f"{user} = @@SESSION.{name}" for name, user in _SAVED)
    out(
        f"-- {label}, for MariaDB: each block below reads the column first and does only "
        "what is left, so the script can be run again, whole, after a stop or after it "
        "finished."
    )
    out(f"SET {saved};")
    out(
        "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', max_statement_time = 0;"
    )
    out(f"-- {label}: what the op refuses, checked before any change")
    out(checks_block(one_transaction_checks(n)))
    # The DEFAULT as found (MariaDB's COLUMN_DEFAULT is SQL: a quoted literal,
    # an expression, or 'NULL'), kept through the holding type.
    kept = (
        "IF(v_old_default IS NULL OR v_old_default = 'NULL', '', "
        "CONCAT(' DEFAULT ', v_old_default))"
    )
    out(f"-- {label}: the column to {holding}, its DEFAULT and COMMENT kept")
    out(
        compound(
            declare
            + found
            + f"  IF v_kind <=> {lit(from_kind)} THEN\n"
            + f"    EXECUTE IMMEDIATE CONCAT({modify}, {lit(f'{holding} {null}')}, "
            + f"{kept}, {comment_clause});\n"
            + "  END IF;\n"
        )
    )
    done = sql.check(n.column, to_kind) or "TRUE"
    out(f"-- {label}: the values converted, unless they are already")
    out(
        compound(
            declare
            + found
            + f"  IF v_kind <=> 'holding' AND NOT EXISTS (SELECT 1 FROM {n.table} "
            + f"WHERE {n.column} IS NOT NULL AND ({done})) THEN\n"
            + f"    UPDATE {n.table} SET {n.column} = {n.converted(n.table)} "
            + f"WHERE {n.column} IS NOT NULL;\n"
            + "  END IF;\n"
        )
    )
    out(f"-- {label}: the column to {n.type_sql}, its DEFAULT converted, its COMMENT kept")
    out(
        compound(
            declare
            + found
            + "  IF v_kind <=> 'holding' THEN\n"
            + _indent(new_default(n))
            + f"    EXECUTE IMMEDIATE CONCAT({modify}, {lit(f'{n.type_sql} {null}')}, "
            + f"IF(v_default IS NULL, '', CONCAT(' DEFAULT ', v_default)), {comment_clause});\n"
            + "  END IF;\n"
        )
    )
    restore = ", ".join(f"SESSION {name} = {user}" for name, user in _SAVED)
    out(f"SET {restore};")


def _indent(sql: str) -> str:
    return "".join("  " + line if line.strip() else line for line in sql.splitlines(True))
